package metrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServe(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg); err == nil {
		t.Fatal("registering twice on one registry must fail")
	}
	m.Records.WithLabelValues("0", "processed").Add(3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, addr, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil) }()
	get := func(path string) (int, string) {
		for i := 0; i < 50; i++ {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		t.Fatalf("GET %s: server not up", path)
		return 0, ""
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get("/readyz"); code != 503 {
		t.Errorf("/readyz before ready = %d, want 503", code)
	}
	m.SetReady(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `processor_records_total{outcome="processed",partition="0"} 3`) {
		t.Errorf("/metrics lacks the record counter:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
