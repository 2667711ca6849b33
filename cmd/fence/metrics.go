package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/fencing/fence/fenceotel"
)

// metricsServer serves the fence library's metrics in the Prometheus text
// format, through the OpenTelemetry Prometheus exporter, for as long as
// fence runs.
type metricsServer struct {
	provider *sdkmetric.MeterProvider
	observer *fenceotel.Observer // on provider
	srv      *http.Server
	served   chan struct{}
	url      string // http://HOST:PORT/metrics, with the port bound
	picked   bool   // the port was 0: the system chose it
}

func serveMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &metricsError{addr: addr, err: err}
	}
	m := &metricsServer{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp),
			sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "fence")))),
		served: make(chan struct{}),
		url:    "http://" + ln.Addr().String() + "/metrics",
	}
	m.observer = fenceotel.New(fenceotel.WithMeterProvider(m.provider))
	_, port, _ := net.SplitHostPort(addr)
	m.picked = port == "0"
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(ln) // ends with Close
	}()
	return m, nil
}

// Close stops the server, within a second for scrapes in flight.
func (m *metricsServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		m.srv.Close()
	}
	<-m.served
	_ = m.observer.Close()
	_ = m.provider.Shutdown(ctx)
}

// metricsError is a failure to listen on --metrics-addr.
type metricsError struct {
	addr string
	err  error
}

func (e *metricsError) Error() string {
	return fmt.Sprintf("cannot serve metrics on --metrics-addr %s: %v", e.addr, e.err)
}

func (e *metricsError) Unwrap() error { return e.err }

func (e *metricsError) hint() string {
	switch {
	case errors.Is(e.err, syscall.EADDRINUSE):
		return "another process listens there: choose another --metrics-addr (port 0 picks a free one)"
	case errors.Is(e.err, syscall.EACCES):
		return "ports below 1024 need privileges: choose a port above 1024, e.g. 127.0.0.1:9464"
	case errors.Is(e.err, syscall.EADDRNOTAVAIL):
		return "no interface of this machine has that address: use 127.0.0.1, 0.0.0.0 or one of its own addresses"
	}
	var dns *net.DNSError
	if errors.As(e.err, &dns) {
		return fmt.Sprintf("the host %q does not resolve: use an IP address, e.g. 127.0.0.1:9464", dns.Name)
	}
	return ""
}
