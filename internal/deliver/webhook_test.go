package deliver

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
)

// RFC 4231, test case 2: HMAC-SHA-256 with key "Jefe".
func TestSignKnownAnswer(t *testing.T) {
	got := Sign([]byte("Jefe"), []byte("what do ya want for nothing?"))
	const want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got != want {
		t.Fatalf("Sign = %s, want %s (RFC 4231 case 2)", got, want)
	}
	// RFC 4231, test case 1: key 20 x 0x0b, data "Hi There".
	key := make([]byte, 20)
	for i := range key {
		key[i] = 0x0b
	}
	if got := Sign(key, []byte("Hi There")); got != "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" {
		t.Fatalf("Sign(case 1) = %s", got)
	}
}

func testDelivery(t *testing.T, id string, rev int) Delivery {
	t.Helper()
	a := alerts.Alert{
		AlertID: id, Revision: rev, Status: alerts.StatusOpen, RuleID: "vibration-high", RuleVersion: 1,
		MachineID: "M-7", Start: 1767348000000, End: 1767348090000, Count: 3, Watermark: alerts.WatermarkNone,
		Reason: "3 high-vibration events (>= 7.1 mm/s) on machine M-7",
	}
	if rev > 0 {
		a.Status = alerts.StatusUpdated
	}
	v, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDelivery(Record{Topic: "vibration.alerts", Key: []byte("M-7"), Value: v, Timestamp: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWebhookRequest(t *testing.T) {
	type seen struct {
		method, path, ctype, key, sig string
		body                          []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Idempotency-Key"), r.Header.Get("X-Signature-SHA256"), b}
	}))
	defer srv.Close()
	d := testDelivery(t, "fcbb6ffe4c70e9d58d7550aa08757d6c", 3)

	const secret = "s3cr3t-value"
	sinks, err := NewSinks([]SinkConfig{
		{Type: TypeWebhook, Name: "signed", URL: srv.URL + "/hook", SecretEnv: "HOOK_SECRET"},
		{Type: TypeWebhook, Name: "plain", URL: srv.URL + "/plain"},
	}, SinkOptions{LookupEnv: func(k string) (string, bool) {
		if k == "HOOK_SECRET" {
			return secret, true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sinks[0].Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/hook" || s.ctype != "application/json" {
		t.Errorf("request %s %s content-type %q", s.method, s.path, s.ctype)
	}
	if string(s.body) != string(d.Record.Value) {
		t.Errorf("body %s, want the alert value as is: %s", s.body, d.Record.Value)
	}
	if s.key != "fcbb6ffe4c70e9d58d7550aa08757d6c-3" {
		t.Errorf("Idempotency-Key %q", s.key)
	}
	// The receiver's check: recompute over the raw body, compare in constant time.
	want, _ := hex.DecodeString(Sign([]byte(secret), s.body))
	sig, err := hex.DecodeString(s.sig)
	if err != nil || !hmac.Equal(sig, want) {
		t.Errorf("signature %q does not verify", s.sig)
	}
	if err := sinks[1].Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.sig != "" || s.key == "" {
		t.Errorf("unsigned sink: signature %q, key %q", s.sig, s.key)
	}
}

func TestWebhookSecretSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	env := func(k string) (string, bool) {
		switch k {
		case "SET":
			return "from-env", true
		case "EMPTY":
			return "", true
		}
		return "", false
	}
	build := func(c SinkConfig) (*Webhook, error) {
		c.Type, c.Name, c.URL = TypeWebhook, "w", "http://127.0.0.1:1/"
		s, err := NewSinks([]SinkConfig{c}, SinkOptions{LookupEnv: env})
		if err != nil {
			return nil, err
		}
		return s[0].(*Webhook), nil
	}
	if w, err := build(SinkConfig{SecretEnv: "SET"}); err != nil || string(w.secret) != "from-env" {
		t.Errorf("secret_env: %v %q", err, w.secret)
	}
	if w, err := build(SinkConfig{SecretFile: file}); err != nil || string(w.secret) != "from-file" {
		t.Errorf("secret_file: %v", err)
	}
	for _, c := range []SinkConfig{{SecretEnv: "UNSET"}, {SecretEnv: "EMPTY"}, {SecretFile: empty}, {SecretFile: filepath.Join(dir, "missing")}} {
		_, err := build(c)
		if err == nil {
			t.Errorf("%+v: no error", c)
			continue
		}
		if strings.Contains(err.Error(), "from-env") || strings.Contains(err.Error(), "from-file") {
			t.Errorf("error reveals a secret: %v", err)
		}
		if !strings.Contains(err.Error(), "delivery.sinks[0]") {
			t.Errorf("error does not name the sink: %v", err)
		}
	}
}

func TestWebhookUnbuildableRequestIsPermanent(t *testing.T) {
	// An unbuildable URL is a permanent failure, never a retry storm.
	w := &Webhook{name: "w", url: "http://[::1", timeout: time.Second, client: http.DefaultClient, now: time.Now}
	err := w.Send(context.Background(), testDelivery(t, "a", 0))
	if !IsPermanent(err) {
		t.Fatalf("bad URL: %v, want permanent", err)
	}
	var se *SendError
	if !errors.As(err, &se) || se.Status != 0 {
		t.Fatalf("bad URL: %+v", se)
	}
}
