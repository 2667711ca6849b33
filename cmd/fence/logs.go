package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// logHandler passes the fence library's log records (renewals that fail
// or come late, a lease repeatedly held longer than its TTL) to the
// user as "warning" events. "fence run" reports a loss itself, so the
// library's loss line is dropped.
type logHandler struct {
	ev    *events
	attrs []slog.Attr
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "fence: lease lost" {
		return nil
	}
	attrs := map[string]string{}
	var text []string
	add := func(a slog.Attr) bool {
		if a.Key == "key" { // every event has the key already
			return true
		}
		v := a.Value.Resolve().String()
		attrs[a.Key] = v
		text = append(text, a.Key+"="+v)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	msg := trimFence(r.Message)
	if len(text) > 0 {
		msg = fmt.Sprintf("%s (%s)", msg, strings.Join(text, " "))
	}
	h.ev.emit(event{Event: "warning", Level: r.Level.String(), Attrs: attrs, Message: msg}, true)
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{ev: h.ev, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }
