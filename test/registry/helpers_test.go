package registry

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/schemas"
)

// eventV1 is schemas/event.avsc as a producer registers it; eventV2 adds a
// defaulted field (gateway) and an optional one (firmware), as a producer's
// next version would.
func eventV1() string { return schemas.Event() }

func eventV2(t *testing.T) string {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(schemas.Event()), &s); err != nil {
		t.Fatal(err)
	}
	s["fields"] = append(s["fields"].([]any),
		map[string]any{"name": "gateway", "type": "string", "default": "unknown"},
		map[string]any{"name": "firmware", "type": []any{"null", "string"}, "default": nil})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventV3Incompatible adds a field without a default: under BACKWARD
// compatibility a reader of v3 could not read v2 records, so the registry
// must refuse it.
func eventV3Incompatible(t *testing.T) string {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(eventV2(t)), &s); err != nil {
		t.Fatal(err)
	}
	s["fields"] = append(s["fields"].([]any), map[string]any{"name": "site", "type": "string"})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// record is a producer's record for eventV1 / eventV2.
type record = avrotest.Event

// produce writes rec with the writer schema text in the wire format of id,
// as a Confluent serializer would.
func produce(t *testing.T, schema string, id uint32, rec any) []byte {
	t.Helper()
	return avrotest.Wire(id, avrotest.Body(t, avrotest.ParseSchema(t, schema), rec))
}

// newRegistry returns a fresh cache (as a new processor instance has) on
// url, with a short timeout.
func newRegistry(t *testing.T, url string) *avro.Registry {
	t.Helper()
	r := avrotest.NewCache(t, avro.ClientOptions{URL: url, Timeout: 3 * time.Second})
	t.Cleanup(r.Client().Close)
	return r
}

// api sends one raw request to the registry's Confluent API.
func api(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, registryURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// proxy is a TCP proxy on 127.0.0.1 in front of the registry that can be
// closed (connections are refused) and opened again on the same port.
type proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, conns: map[net.Conn]struct{}{}}
	if err := p.open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.addr = p.ln.Addr().String()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) open(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	return nil
}

func (p *proxy) serve(c net.Conn) {
	u, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
	c.Close()
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// close stops listening and cuts every connection; idempotent.
func (p *proxy) close() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// reopen listens on the same port again.
func (p *proxy) reopen(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.open(p.addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reopen proxy on %s: %v", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
