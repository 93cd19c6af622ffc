package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vibeline/processor/internal/alerts"
)

// Alertmanager posts each revision to Prometheus Alertmanager's
// /api/v2/alerts as one alert (see AlertmanagerPayload). Alertmanager
// identifies an alert by its label set, which includes alert_id, so every
// revision of one alert updates the same Alertmanager alert and a repeated
// delivery is harmless.
type Alertmanager struct {
	name           string
	url            string // <base>/api/v2/alerts
	timeout        time.Duration
	labels         map[string]string
	resolveTimeout time.Duration
	now            func() time.Time
	client         *http.Client
}

var _ Sink = (*Alertmanager)(nil)

// Name is the configured name.
func (a *Alertmanager) Name() string { return a.name }

// Send posts one revision.
func (a *Alertmanager) Send(ctx context.Context, d Delivery) error {
	body, err := AlertmanagerPayload(d, a.labels, a.resolveTimeout, a.now())
	if err != nil {
		return &SendError{Sink: a.name, Class: Permanent, Err: err}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "vibeline-processor-deliver")
	h.Set(HeaderIdempotencyKey, d.IdempotencyKey)
	return post(ctx, a.client, a.now, a.name, a.url, a.timeout, h, body)
}

// CloseIdleConnections closes the sink's idle keep-alive connections
// (Service.Run calls it when it stops).
func (a *Alertmanager) CloseIdleConnections() { a.client.CloseIdleConnections() }

// amAlert is one element of Alertmanager's postable alerts (API v2).
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    string            `json:"startsAt"`
	EndsAt      string            `json:"endsAt,omitempty"`
}

// AlertmanagerPayload returns the body posted to /api/v2/alerts for one
// revision: a JSON array of one alert with
//
//	labels       alertname=<rule_id>, rule_version, machine_id, alert_id, plus
//	             the sink's static labels
//	annotations  summary=<reason>, evidence=<compact evidence>, status,
//	             revision, count, idempotency_key, and merged_into on merged
//	startsAt     the incident start (event time)
//	endsAt       on closed and merged: the incident end, clamped to at most
//	             now (so the alert resolves at once even when event time
//	             runs ahead of the clock) and at least startsAt; on open and
//	             updated: now + resolveTimeout, or absent when resolveTimeout
//	             is 0 (Alertmanager then applies its own resolve_timeout)
//
// now is the delivery time. Members and map keys are in a fixed order, so
// the bytes are a function of the arguments.
func AlertmanagerPayload(d Delivery, labels map[string]string, resolveTimeout time.Duration, now time.Time) ([]byte, error) {
	a := d.Alert
	l := make(map[string]string, 4+len(labels))
	for k, v := range labels {
		l[k] = v
	}
	l["alertname"] = a.RuleID
	l["rule_version"] = strconv.Itoa(a.RuleVersion)
	l["machine_id"] = a.MachineID
	l["alert_id"] = a.AlertID
	summary := a.Reason
	if summary == "" {
		summary = fmt.Sprintf("alert %s on machine %s, revision %d: %s", a.AlertID, a.MachineID, a.Revision, a.Status)
	}
	ann := map[string]string{
		"summary":         summary,
		"evidence":        evidenceText(a.Evidence),
		"status":          a.Status,
		"revision":        strconv.Itoa(a.Revision),
		"count":           strconv.Itoa(a.Count),
		"idempotency_key": d.IdempotencyKey,
	}
	if a.EvidenceOmitted > 0 { // evidence cut to fit the producer's record limit
		ann["evidence_omitted"] = strconv.Itoa(a.EvidenceOmitted)
	}
	out := amAlert{Labels: l, Annotations: ann, StartsAt: alerts.FormatTime(a.Start)}
	switch a.Status {
	case alerts.StatusClosed, alerts.StatusMerged:
		// Resolved at once even when event time runs ahead of the clock:
		// endsAt at most now, and at least startsAt, which is then moved
		// back to now as well (Alertmanager refuses endsAt < startsAt).
		nowMs := now.UnixMilli()
		start := min(a.Start, nowMs)
		if start != a.Start {
			out.StartsAt = alerts.FormatTime(start)
		}
		out.EndsAt = alerts.FormatTime(max(min(a.End, nowMs), start))
		if a.Status == alerts.StatusMerged {
			ann["merged_into"] = a.MergedInto
		}
	default:
		if resolveTimeout > 0 {
			out.EndsAt = alerts.FormatTime(now.Add(resolveTimeout).UnixMilli())
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode([]amAlert{out}); err != nil {
		return nil, fmt.Errorf("deliver: alertmanager payload: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// evidenceText renders the evidence compactly, one sample per clause:
// "e-1 S-1 2026-01-02T10:00:00.000Z 7.5 mm/s; e-2 ...".
func evidenceText(ev []alerts.Evidence) string {
	var b strings.Builder
	for i, e := range ev {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s %s %s mm/s", e.EventID, e.SensorID, alerts.FormatTime(e.TS), strconv.FormatFloat(e.Value, 'g', -1, 64))
	}
	return b.String()
}
