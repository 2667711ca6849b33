package storeurl

import (
	"net/url"
	"slices"
	"strings"
)

// Secrets returns the credentials raw carries, as they may appear in a
// driver's error text: the password of its user info and the values of
// query parameters that may carry credentials (those Redact hides), each
// as written and unescaped. A plain path has none.
func Secrets(raw string) []string {
	if isPath(raw) {
		return nil
	}
	var out []string
	add := func(s string) {
		if s == "" || s == redacted {
			return
		}
		out = append(out, s)
		if u, err := url.QueryUnescape(s); err == nil {
			out = append(out, u)
		}
		if u, err := url.PathUnescape(s); err == nil {
			out = append(out, u)
		}
	}
	// Both the strict and the loose parse: a URL url.Parse refuses still
	// reaches drivers' messages as written.
	if m := looseUserinfo.FindStringSubmatchIndex(raw); m != nil {
		add(raw[m[3]+1 : m[1]-1]) // between the user's ':' and the '@'
	}
	for _, m := range looseParam.FindAllStringSubmatch(raw, -1) {
		if secretParam(m[2]) {
			add(m[3])
		}
	}
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				add(p)
			}
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			for k, vs := range q {
				if secretParam(k) {
					for _, v := range vs {
						add(v)
					}
				}
			}
		}
	}
	// Longest first, so that a secret containing another is hidden whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// Scrub returns text with every credential of the store URL raw (see
// Secrets) replaced by "xxxxx": for error text from drivers, which may
// repeat what they were given.
func Scrub(raw, text string) string {
	for _, s := range Secrets(raw) {
		text = strings.ReplaceAll(text, s, redacted)
	}
	return text
}
