package deliver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pipeNet is an in-memory network for an http.Server and http.Client
// inside a synctest bubble: real HTTP/1.1 over net.Pipe connections, whose
// blocking is durable, so virtual time advances while a receiver is slow.
type pipeNet struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeNet() *pipeNet { return &pipeNet{conns: make(chan net.Conn), closed: make(chan struct{})} }

func (n *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.closed:
		return nil, net.ErrClosed
	}
}

func (n *pipeNet) Close() error   { n.once.Do(func() { close(n.closed) }); return nil }
func (n *pipeNet) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

func (n *pipeNet) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case n.conns <- server:
		return client, nil
	case <-n.closed:
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: fmt.Errorf("connection refused")}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestOutageFiveMinutesVirtualTime: a webhook receiver answers 503 for 5
// minutes of virtual time, then recovers. Every revision arrives, exactly
// once at the receiver, in order per machine; nothing is dead-lettered; the
// breaker keeps the lanes from hammering the receiver meanwhile.
func TestOutageFiveMinutesVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		const outage = 5 * time.Minute
		pn := newPipeNet()
		type acceptance struct {
			machine, key string
		}
		var (
			mu       sync.Mutex
			accepted = map[string]int{}
			order    []acceptance
			refused  int
			repeats  int
		)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get(HeaderIdempotencyKey)
			var body struct {
				MachineID string `json:"machine_id"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if time.Since(start) < outage {
				refused++
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
				return
			}
			accepted[key]++
			if accepted[key] > 1 {
				repeats++ // honoured: 200 again, nothing done twice
				return
			}
			order = append(order, acceptance{body.MachineID, key})
		})}
		go srv.Serve(pn)
		tr := &http.Transport{DialContext: pn.DialContext}
		client := &http.Client{Transport: tr}

		sinks, err := NewSinks([]SinkConfig{{Type: TypeWebhook, Name: "hook", URL: "http://receiver/hook", Timeout: 5 * time.Second}},
			SinkOptions{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		retry := RetryConfig{Initial: time.Second, Max: 30 * time.Second, MaxAttempts: 10, MaxElapsed: 10 * time.Minute}
		br := BreakerConfig{Failures: 5, Cooldown: 30 * time.Second}
		rs, met := testRunners(t, retry, br, sinks...)
		var dlq dlqLog
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		const parts, perPart = 4, 25
		var ps []*partition
		want := map[string][]string{} // machine -> keys in offset order
		for i := range parts {
			machine := fmt.Sprintf("M-%d", i)
			p := newPartition("vibration.alerts", int32(i), rs, dlq.write, nil)
			ps = append(ps, p)
			recs := alertRecords(t, int32(i), machine, perPart, 3)
			for _, r := range recs {
				d, _ := NewDelivery(r)
				want[machine] = append(want[machine], d.IdempotencyKey)
			}
			wg.Go(func() { p.run(ctx) })
			p.push(recs...)
		}
		// Wait (virtually) until every partition finished, at most 30 minutes.
		for time.Since(start) < 30*time.Minute {
			done := true
			for _, p := range ps {
				if off, _, ok := p.commitPos(); !ok || off != perPart {
					done = false
				}
			}
			if done {
				break
			}
			time.Sleep(time.Second)
		}
		took := time.Since(start)
		cancel()
		wg.Wait()
		srv.Close()
		tr.CloseIdleConnections()

		mu.Lock()
		defer mu.Unlock()
		t.Logf("all delivered %s after the outage began; %d requests refused during the 5 minute outage", took, refused)
		for _, p := range ps {
			if off, _, _ := p.commitPos(); off != perPart {
				t.Errorf("partition %d: commit position %d, want %d", p.id, off, perPart)
			}
		}
		if took < outage {
			t.Errorf("finished after %s, before the outage ended", took)
		}
		if took > outage+2*br.Cooldown {
			t.Errorf("finished %s after the outage ended, want within about one cool-down", took-outage)
		}
		if len(accepted) != parts*perPart || repeats != 0 {
			t.Errorf("%d keys accepted (want %d), %d repeats (want 0)", len(accepted), parts*perPart, repeats)
		}
		got := map[string][]string{}
		for _, a := range order {
			got[a.machine] = append(got[a.machine], a.key)
		}
		for m, keys := range want {
			if fmt.Sprint(got[m]) != fmt.Sprint(keys) {
				t.Errorf("machine %s: accepted in order %v, want %v", m, got[m], keys)
			}
		}
		if len(dlq.all()) != 0 {
			t.Errorf("the outage dead-lettered %d revisions", len(dlq.all()))
		}
		// The breaker, not the retry loop, carried the outage: a handful of
		// attempts before it opened, then about one probe per cool-down.
		if refused < br.Failures || refused > parts+br.Failures+int(outage/br.Cooldown)+2 {
			t.Errorf("%d requests refused during the outage, want between %d and %d", refused, br.Failures, parts+br.Failures+int(outage/br.Cooldown)+2)
		}
		if s := rs[0].breaker.State(); s != StateClosed {
			t.Errorf("breaker %s after recovery, want closed", s)
		}
		ok := value(t, met.Deliveries.WithLabelValues("hook", OutcomeDelivered)) + value(t, met.Deliveries.WithLabelValues("hook", OutcomeRetried))
		if ok != parts*perPart || value(t, met.Deliveries.WithLabelValues("hook", OutcomeRetried)) < 1 {
			t.Errorf("metrics: delivered+retried = %v, retried = %v", ok, value(t, met.Deliveries.WithLabelValues("hook", OutcomeRetried)))
		}
		if value(t, met.BreakerState.WithLabelValues("hook")) != float64(StateClosed) {
			t.Error("breaker gauge not back to closed")
		}
		if n := value(t, met.Latency.WithLabelValues("hook").(prometheus.Metric)); n != parts*perPart {
			t.Errorf("latency observations %v", n)
		}
	})
}

// TestRetryAfterOutageNeverDeadLetters: a receiver down for maintenance
// answers every request 503 with Retry-After: 3600 for two hours (virtual
// time). The lane honours the Retry-After (up to retry.max, here 1h), and
// the revisions wait: a Retry-After counts towards retry.max_elapsed only
// as much as the backoff would have, so the long waits of an outage never
// exhaust a revision's budget (they once dead-lettered it after its first
// attempt, the breaker still closed). Then every revision is delivered.
func TestRetryAfterOutageNeverDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		const outage = 2 * time.Hour
		pn := newPipeNet()
		var (
			mu       sync.Mutex
			accepted int
			refused  int
		)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if time.Since(start) < outage {
				refused++
				w.Header().Set("Retry-After", "3600")
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
				return
			}
			accepted++
		})}
		go srv.Serve(pn)
		tr := &http.Transport{DialContext: pn.DialContext}
		cfg := Default()
		cfg.Sinks = []SinkConfig{{Type: TypeWebhook, Name: "hook", URL: "http://receiver/hook", Timeout: 10 * time.Second}}
		cfg.Retry.Max = time.Hour
		if err := cfg.Validate(); err != nil {
			t.Fatalf("the configuration must be valid: %v", err)
		}
		sinks, err := NewSinks(cfg.Sinks, SinkOptions{Client: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := testRunners(t, cfg.Retry, cfg.Breaker, sinks...)
		var dlq dlqLog
		ctx, cancel := context.WithCancel(context.Background())
		p := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		var wg sync.WaitGroup
		wg.Go(func() { p.run(ctx) })
		const n = 3
		p.push(alertRecords(t, 0, "M-1", n, 1)...)
		for time.Since(start) < 4*outage {
			if off, _, ok := p.commitPos(); ok && off == n {
				break
			}
			time.Sleep(time.Second)
		}
		cancel()
		wg.Wait()
		srv.Close()
		tr.CloseIdleConnections()
		mu.Lock()
		defer mu.Unlock()
		if dls := dlq.all(); len(dls) > 0 {
			t.Fatalf("the outage dead-lettered %d revisions: reason %s after %d attempts: %s", len(dls), dls[0].Reason, dls[0].Attempts, dls[0].Detail)
		}
		if accepted != n {
			t.Fatalf("%d revisions accepted after the outage, want %d (%d refused)", accepted, n, refused)
		}
		t.Logf("%d requests refused during the %s outage; all delivered %s after it began", refused, outage, time.Since(start).Round(time.Second))
	})
}
