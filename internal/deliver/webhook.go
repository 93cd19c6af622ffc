package deliver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"
)

// Webhook header names.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderSignature      = "X-Signature-SHA256"
)

// Webhook POSTs the alert JSON (Delivery.Body: the value exactly as on the
// alerts topic for JSON alerts, the JSON encoding of the decoded revision
// for Avro alerts) to a URL, with the headers Content-Type:
// application/json, Idempotency-Key: <alert_id>-<revision> and, when a
// secret is configured, X-Signature-SHA256: hex(HMAC-SHA256(secret, body)).
type Webhook struct {
	name    string
	url     string
	timeout time.Duration
	secret  []byte // never logged
	client  *http.Client
	now     func() time.Time
}

var _ Sink = (*Webhook)(nil)

// Name is the configured name.
func (w *Webhook) Name() string { return w.name }

// Send posts one revision.
func (w *Webhook) Send(ctx context.Context, d Delivery) error {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "vibeline-processor-deliver")
	h.Set(HeaderIdempotencyKey, d.IdempotencyKey)
	if len(w.secret) > 0 {
		h.Set(HeaderSignature, Sign(w.secret, d.Body))
	}
	return post(ctx, w.client, w.now, w.name, w.url, w.timeout, h, d.Body)
}

// CloseIdleConnections closes the sink's idle keep-alive connections
// (Service.Run calls it when it stops).
func (w *Webhook) CloseIdleConnections() { w.client.CloseIdleConnections() }

// Sign returns the webhook signature of body: the lower-case hex of
// HMAC-SHA256(secret, body). A receiver recomputes it over the raw body it
// received and compares in constant time (hmac.Equal).
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
