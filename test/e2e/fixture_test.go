package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/test/e2e/harness"
)

// t0 is the event time the fixture is written around.
var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// event is the JSON value of a well-formed schema version 1 event; ts is
// written as RFC 3339 when rfc is true, else as epoch milliseconds.
func event(id, machine, sensor string, ts time.Time, rfc bool, value, unit, quality string) string {
	tsJSON := strconv.FormatInt(ts.UnixMilli(), 10)
	if rfc {
		tsJSON = `"` + ts.Format("2006-01-02T15:04:05.000Z07:00") + `"`
	}
	return fmt.Sprintf(`{"event_id":%q,"machine_id":%q,"sensor_id":%q,"ts":%s,"seq":7,"value":%s,"unit":%q,"schema_version":1,"quality":%q}`,
		id, machine, sensor, tsJSON, value, unit, quality)
}

type fixtureRecord struct {
	what    string // for messages
	key     string
	value   string
	ts      time.Time // Kafka record timestamp
	headers []kgo.RecordHeader
}

// TestFixture runs one instance over a hand-written input on a one-partition
// topic and checks every committed record against expectations written out
// here, and against the reference. The input holds: an incident opened by 3
// high events within 2 minutes (one in in/s), a redelivered duplicate, a
// high event of uncertain quality (filtered), a late-but-applied event that
// reveals an earlier firing set (updated, late), a too-late event, one
// poison record per dead-letter reason (decode_error, invalid_field twice,
// schema_unknown, key_mismatch, clock_ahead), a far-later event that closes
// the incident, an incident opened late, two incidents chained by a late
// event (updated and merged), and a last event of another machine that
// closes the rest. Checked: every alert revision's fields (statuses,
// revisions, ids, start, end, count, evidence, late flags, watermarks,
// reasons) in order, the dead letters' reasons, original keys, bytes and
// headers, the too-late record's headers, and the accounting.
//
// Rule: the vibration defaults (N = 3, S = 2m, D = 30s, L = 10m, H = 1h,
// max_future_skew = 5m, value >= 7.1 mm/s and quality good).
func TestFixture(t *testing.T) {
	t.Parallel()
	seeds := harness.Bootstrap(t)
	input := newInput(t, seeds, "e2e-fixture.in", 1)
	rule := config.Default().Rule
	d := newDeployment(t, seeds, input, "fixture", rule)

	e1 := event("e1", "M-1", "S-1", at(0), true, "9.0", "mm/s", "good")
	e2 := event("e2", "M-1", "S-2", at(30*time.Second), false, "8.0", "mm/s", "good")
	clockAheadRecTS := at(100 * time.Second)
	recs := []fixtureRecord{
		// W (the watermark before each record) is given in the comments.
		/* 0 */ {"e1", "M-1", e1, at(50 * time.Millisecond), nil}, // W none -> t0-30s
		/* 1 */ {"e2", "M-1", e2, at(30*time.Second + 50*time.Millisecond), nil}, // W -> t0
		/* 2 */ {"e2 redelivered", "M-1", e2, at(31 * time.Second), nil}, // duplicate
		// in/s: 0.4 in/s = 10.16 mm/s. Fires: e1, e2, e3 within 60s -> open.
		/* 3 */ {"e3", "M-1", event("e3", "M-1", "S-1", at(60*time.Second), false, "0.4", "in/s", "good"), at(60*time.Second + 50*time.Millisecond), nil}, // W t0 -> t0+30s
		/* 4 */ {"f1 (low value)", "M-2", event("f1", "M-2", "S-3", at(90*time.Second), false, "2.0", "mm/s", "good"), at(90*time.Second + 50*time.Millisecond), nil}, // W -> t0+60s
		/* 5 */ {"f2 (uncertain)", "M-1", event("f2", "M-1", "S-1", at(70*time.Second), false, "12.0", "mm/s", "uncertain"), at(91 * time.Second), nil},
		// Late but applied (t0-20s < W = t0+60s, >= W-L): an earlier firing
		// set e0, e1, e2 -> updated, late.
		/* 6 */ {"e0 (late)", "M-1", event("e0", "M-1", "S-2", at(-20*time.Second), true, "9.5", "mm/s", "good"), at(92 * time.Second), nil},
		// Too late: t0-15m < W - L = t0-9m.
		/* 7 */ {"e-old (too late)", "M-1", event("e-old", "M-1", "S-1", at(-15*time.Minute), false, "11.0", "mm/s", "good"), at(95 * time.Second), nil},
		/* 8 */ {"decode_error", "M-1", `this is not json`, at(96 * time.Second), []kgo.RecordHeader{{Key: "trace", Value: []byte("t-8")}}},
		/* 9 */ {"invalid_field: no schema_version", "M-1", strings.Replace(event("p9", "M-1", "S-1", at(97*time.Second), false, "9", "mm/s", "good"), `"schema_version":1,`, "", 1), at(97 * time.Second), nil},
		/* 10 */ {"invalid_field: ts", "M-1", `{"event_id":"p10","machine_id":"M-1","sensor_id":"S-1","ts":"yesterday","seq":1,"value":9,"unit":"mm/s","schema_version":1,"quality":"good"}`, at(97 * time.Second), nil},
		/* 11 */ {"schema_unknown", "M-1", strings.Replace(event("p11", "M-1", "S-1", at(98*time.Second), false, "9", "mm/s", "good"), `"schema_version":1`, `"schema_version":9`, 1), at(98 * time.Second), nil},
		/* 12 */ {"key_mismatch", "M-1", event("p12", "M-9", "S-1", at(98*time.Second), false, "9.0", "mm/s", "good"), at(99 * time.Second), nil},
		/* 13 */ {"clock_ahead", "M-1", event("p13", "M-1", "S-1", clockAheadRecTS.Add(time.Hour), false, "9.0", "mm/s", "good"), clockAheadRecTS, nil},
		// Far later, low: W -> t0+29m30s; W - L = t0+19m30s > end + S = t0+3m:
		// the M-1 incident closes.
		/* 14 */ {"closer (low)", "M-1", event("e-close", "M-1", "S-1", at(30*time.Minute), false, "1.0", "mm/s", "good"), at(30*time.Minute + 50*time.Millisecond), nil},
		// Three late-but-applied events of M-3 (behind W = t0+29m30s): a new
		// incident opened late, left open.
		/* 15 */ {"x1", "M-3", event("x1", "M-3", "S-5", at(29*time.Minute+5*time.Second), false, "7.1", "mm/s", "good"), at(30*time.Minute + time.Second), nil},
		/* 16 */ {"x2", "M-3", event("x2", "M-3", "S-5", at(29*time.Minute+10*time.Second), false, "7.5", "mm/s", "good"), at(30*time.Minute + 2*time.Second), nil},
		/* 17 */ {"x3", "M-3", event("x3", "M-3", "S-6", at(29*time.Minute+20*time.Second), true, "20", "mm/s", "good"), at(30*time.Minute + 3*time.Second), nil},
		// M-4, late but applied (W - L = t0+19m30s): incident A (a1..a3,
		// 20m00s-20m20s) and incident B (b1..b3, 22m40s-23m00s), 2m20s
		// apart; then c at 21m30s fires a2,a3,c (20m10s-21m30s) and
		// c,b1,b2 (21m30s-22m50s), which touch each other and overlap A and
		// B: A (earliest start) survives, updated; B is merged into A.
		/* 18 */ {"a1", "M-4", event("a1", "M-4", "S-7", at(20*time.Minute), false, "8.0", "mm/s", "good"), at(30*time.Minute + 4*time.Second), nil},
		/* 19 */ {"a2", "M-4", event("a2", "M-4", "S-7", at(20*time.Minute+10*time.Second), false, "8.0", "mm/s", "good"), at(30*time.Minute + 4*time.Second), nil},
		/* 20 */ {"a3", "M-4", event("a3", "M-4", "S-7", at(20*time.Minute+20*time.Second), false, "8.0", "mm/s", "good"), at(30*time.Minute + 4*time.Second), nil},
		/* 21 */ {"b1", "M-4", event("b1", "M-4", "S-7", at(22*time.Minute+40*time.Second), false, "8.0", "mm/s", "good"), at(30*time.Minute + 5*time.Second), nil},
		/* 22 */ {"b2", "M-4", event("b2", "M-4", "S-7", at(22*time.Minute+50*time.Second), false, "8.0", "mm/s", "good"), at(30*time.Minute + 5*time.Second), nil},
		/* 23 */ {"b3", "M-4", event("b3", "M-4", "S-7", at(23*time.Minute), false, "8.0", "mm/s", "good"), at(30*time.Minute + 5*time.Second), nil},
		/* 24 */ {"c", "M-4", event("c", "M-4", "S-7", at(21*time.Minute+30*time.Second), false, "8.0", "mm/s", "good"), at(30*time.Minute + 6*time.Second), nil},
		// Another machine's low event far later: W -> t0+44m30s, W - L =
		// t0+34m30s passes end + S of A (t0+25m) and of M-3's incident
		// (t0+31m20s): both close, in order of end.
		/* 25 */ {"closer 2 (low, M-2)", "M-2", event("f3", "M-2", "S-3", at(45*time.Minute), false, "3.0", "mm/s", "good"), at(45*time.Minute + 50*time.Millisecond), nil},
	}
	cl := harness.NewClient(t, seeds, kgo.DefaultProduceTopic(input))
	krecs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krecs[i] = &kgo.Record{Key: []byte(r.key), Value: []byte(r.value), Timestamp: r.ts, Headers: r.headers}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, krecs...).FirstErr(); err != nil {
		t.Fatalf("produce the fixture: %v", err)
	}
	for i, r := range krecs {
		if r.Partition != 0 || r.Offset != int64(i) {
			t.Fatalf("fixture record %d (%s) landed at %d/%d, want 0/%d", i, recs[i].what, r.Partition, r.Offset, i)
		}
	}

	p := d.start("f0", d.stateDir("f0"))
	log, ends := readLog(t, seeds, input)
	waitConsumed(t, d, ends, time.Minute)
	p.stop(t, d)
	got := readOutputs(t, d)
	t.Logf("%s", got.summary())

	// ---- alerts, written out ----
	ts := func(d time.Duration) string { return alerts.FormatTime(at(d).UnixMilli()) }
	ev := func(id, sensor string, tsd time.Duration, value float64, offset int64) alerts.Evidence {
		return alerts.Evidence{EventID: id, SensorID: sensor, TS: at(tsd).UnixMilli(), Value: value, Partition: 0, Offset: offset}
	}
	m1 := alerts.ID(rule.ID, rule.Version, "M-1", "e1")
	m3 := alerts.ID(rule.ID, rule.Version, "M-3", "x1")
	m4a := alerts.ID(rule.ID, rule.Version, "M-4", "a1")
	m4b := alerts.ID(rule.ID, rule.Version, "M-4", "b1")
	evA := []alerts.Evidence{ev("a1", "S-7", 20*time.Minute, 8, 18), ev("a2", "S-7", 20*time.Minute+10*time.Second, 8, 19), ev("a3", "S-7", 20*time.Minute+20*time.Second, 8, 20)}
	evB := []alerts.Evidence{ev("b1", "S-7", 22*time.Minute+40*time.Second, 8, 21), ev("b2", "S-7", 22*time.Minute+50*time.Second, 8, 22), ev("b3", "S-7", 23*time.Minute, 8, 23)}
	evM3 := []alerts.Evidence{ev("x1", "S-5", 29*time.Minute+5*time.Second, 7.1, 15), ev("x2", "S-5", 29*time.Minute+10*time.Second, 7.5, 16), ev("x3", "S-6", 29*time.Minute+20*time.Second, 20, 17)}
	w1 := ts(29*time.Minute + 30*time.Second) // W after the first closer
	w2 := ts(44*time.Minute + 30*time.Second) // W after the second closer
	type wantAlert struct {
		key, id, status string
		mergedInto      string
		rev, count      int
		start, end      string
		evidence        []alerts.Evidence
		late            bool
		watermark       string
		reason          string
	}
	wantAlerts := []wantAlert{
		{"M-1", m1, "open", "", 0, 3, ts(0), ts(60 * time.Second),
			[]alerts.Evidence{ev("e1", "S-1", 0, 9, 0), ev("e2", "S-2", 30*time.Second, 8, 1), ev("e3", "S-1", 60*time.Second, 10.16, 3)},
			false, ts(0), "3 high-vibration events on machine M-1 within 1m0s, from 2026-03-01T10:00:00.000Z to 10:01:00.000Z"},
		{"M-1", m1, "updated", "", 1, 4, ts(-20 * time.Second), ts(60 * time.Second),
			[]alerts.Evidence{ev("e0", "S-2", -20*time.Second, 9.5, 6), ev("e1", "S-1", 0, 9, 0), ev("e2", "S-2", 30*time.Second, 8, 1)},
			true, ts(60 * time.Second), "4 high-vibration events on machine M-1 within 1m20s, from 2026-03-01T09:59:40.000Z to 10:01:00.000Z (revised)"},
		{"M-1", m1, "closed", "", 2, 4, ts(-20 * time.Second), ts(60 * time.Second),
			[]alerts.Evidence{ev("e0", "S-2", -20*time.Second, 9.5, 6), ev("e1", "S-1", 0, 9, 0), ev("e2", "S-2", 30*time.Second, 8, 1)},
			false, w1, "4 high-vibration events on machine M-1 within 1m20s, from 2026-03-01T09:59:40.000Z to 10:01:00.000Z, closed"},
		{"M-3", m3, "open", "", 0, 3, ts(29*time.Minute + 5*time.Second), ts(29*time.Minute + 20*time.Second), evM3,
			true, w1, "3 high-vibration events on machine M-3 within 15s, from 2026-03-01T10:29:05.000Z to 10:29:20.000Z"},
		{"M-4", m4a, "open", "", 0, 3, ts(20 * time.Minute), ts(20*time.Minute + 20*time.Second), evA,
			true, w1, "3 high-vibration events on machine M-4 within 20s, from 2026-03-01T10:20:00.000Z to 10:20:20.000Z"},
		{"M-4", m4b, "open", "", 0, 3, ts(22*time.Minute + 40*time.Second), ts(23 * time.Minute), evB,
			true, w1, "3 high-vibration events on machine M-4 within 20s, from 2026-03-01T10:22:40.000Z to 10:23:00.000Z"},
		{"M-4", m4a, "updated", "", 1, 7, ts(20 * time.Minute), ts(23 * time.Minute), evA,
			true, w1, "7 high-vibration events on machine M-4 within 3m0s, from 2026-03-01T10:20:00.000Z to 10:23:00.000Z (revised)"},
		{"M-4", m4b, "merged", m4a, 1, 3, ts(22*time.Minute + 40*time.Second), ts(23 * time.Minute), evB,
			true, w1, "3 high-vibration events on machine M-4 within 20s, from 2026-03-01T10:22:40.000Z to 10:23:00.000Z, merged into alert " + m4a},
		{"M-4", m4a, "closed", "", 2, 7, ts(20 * time.Minute), ts(23 * time.Minute), evA,
			false, w2, "7 high-vibration events on machine M-4 within 3m0s, from 2026-03-01T10:20:00.000Z to 10:23:00.000Z, closed"},
		{"M-3", m3, "closed", "", 1, 3, ts(29*time.Minute + 5*time.Second), ts(29*time.Minute + 20*time.Second), evM3,
			false, w2, "3 high-vibration events on machine M-3 within 15s, from 2026-03-01T10:29:05.000Z to 10:29:20.000Z, closed"},
	}
	// All alerts are on the alerts topic's one partition, in the order the
	// records that caused them were processed.
	gotAlerts := got.alerts
	if len(gotAlerts) != len(wantAlerts) {
		t.Errorf("%d alert revisions committed, want %d:\n%s", len(gotAlerts), len(wantAlerts), values(gotAlerts))
	}
	for i := range min(len(gotAlerts), len(wantAlerts)) {
		r, w := gotAlerts[i], wantAlerts[i]
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Errorf("alert %d: %v: %s", i, err, r.Value)
			continue
		}
		gotWM := "none"
		if a.Watermark != alerts.WatermarkNone {
			gotWM = alerts.FormatTime(a.Watermark)
		}
		checks := []struct {
			field     string
			got, want any
		}{
			{"key", string(r.Key), w.key},
			{"alert_id", a.AlertID, w.id},
			{"revision", a.Revision, w.rev},
			{"status", a.Status, w.status},
			{"merged_into", a.MergedInto, w.mergedInto},
			{"rule_id", a.RuleID, rule.ID},
			{"rule_version", a.RuleVersion, rule.Version},
			{"machine_id", a.MachineID, w.key},
			{"start", alerts.FormatTime(a.Start), w.start},
			{"end", alerts.FormatTime(a.End), w.end},
			{"count", a.Count, w.count},
			{"evidence", fmt.Sprintf("%+v", a.Evidence), fmt.Sprintf("%+v", w.evidence)},
			{"late", a.Late, w.late},
			{"watermark", gotWM, w.watermark},
			{"reason", a.Reason, w.reason},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("alert %d (%s rev %d %s): %s = %v, want %v", i, w.key, w.rev, w.status, c.field, c.got, c.want)
			}
		}
		if len(r.Headers) != 0 {
			t.Errorf("alert %d has headers %v, want none", i, r.Headers)
		}
	}

	// ---- dead letters and the too-late record, written out ----
	srcHeaders := func(offset int) []string {
		return []string{
			"source.topic=" + input,
			"source.partition=0",
			"source.offset=" + strconv.Itoa(offset),
			"source.timestamp=" + strconv.FormatInt(recs[offset].ts.UnixMilli(), 10),
		}
	}
	type wantSide struct {
		offset  int
		headers []string // exact, in order, up to error.reason; error.detail is checked apart
		detail  string   // error.detail must contain it
	}
	// Each dead letter names the rule version that wrote it.
	dlqRules := "dlq.rules=" + rule.ID + "@" + strconv.Itoa(rule.Version)
	dlqWant := []wantSide{
		{8, []string{"trace=t-8", "error.reason=decode_error"}, "JSON"},
		{9, []string{"error.reason=invalid_field"}, "schema_version"},
		{10, []string{"error.reason=invalid_field"}, `"ts"`},
		{11, []string{"error.reason=schema_unknown"}, "schema_version"},
		{12, []string{"error.reason=key_mismatch"}, "machine_id"},
		{13, []string{"error.reason=clock_ahead"}, `"ts"`},
	}
	if len(got.dlq) != len(dlqWant) {
		t.Errorf("%d dead letters committed, want %d", len(got.dlq), len(dlqWant))
	}
	for i := range min(len(got.dlq), len(dlqWant)) {
		r, w := got.dlq[i], dlqWant[i]
		in := recs[w.offset]
		if string(r.Key) != in.key || string(r.Value) != in.value {
			t.Errorf("dead letter %d (%s): key %q value %q, want the original key %q and value %q", i, in.what, r.Key, r.Value, in.key, in.value)
		}
		var hs []string
		detail := ""
		for _, h := range r.Headers {
			if h.Key == pipeline.HeaderErrorDetail {
				detail = string(h.Value)
				continue
			}
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		if want := append(append(slices.Clone(w.headers), dlqRules), srcHeaders(w.offset)...); !slices.Equal(hs, want) {
			t.Errorf("dead letter %d (%s): headers (without error.detail) %q, want %q", i, in.what, hs, want)
		}
		if !strings.Contains(detail, w.detail) {
			t.Errorf("dead letter %d (%s): error.detail %q, want it to mention %s", i, in.what, detail, w.detail)
		}
	}
	lateWant := append([]string{"late.reason=too_late", "late.watermark=" + ts(60*time.Second), "late.lateness_ms=960000", "late.rule=vibration-high", "late.rule_version=1"}, srcHeaders(7)...)
	if len(got.late) != 1 {
		t.Errorf("%d too-late records committed, want 1", len(got.late))
	} else {
		r := got.late[0]
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		if string(r.Key) != recs[7].key || string(r.Value) != recs[7].value || !slices.Equal(hs, lateWant) {
			t.Errorf("too-late record: key %q value %q headers %q; want key %q value %q headers %q",
				r.Key, r.Value, hs, recs[7].key, recs[7].value, lateWant)
		}
	}

	// ---- accounting, written out ----
	wantAcct := pipeline.Accounting{Version: 1, NextOffset: 26, Records: 26, Processed: 14, Filtered: 4, Duplicate: 1, DeadLettered: 6, TooLate: 1}
	if a := got.acct[0]; a != wantAcct {
		t.Errorf("accounting %+v, want %+v", a, wantAcct)
	}

	// ---- and the reference agrees ----
	want, refAcct := reference(t, d, log)
	if refAcct[0] != wantAcct {
		t.Errorf("the reference's accounting %+v differs from the fixture's %+v", refAcct[0], wantAcct)
	}
	checkCommitted(t, d, got, want, refAcct, log, ends)

	checkCreatedTopics(t, d, 1)
}

func values(recs []*kgo.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "  %s: %s\n", r.Key, r.Value)
	}
	return b.String()
}

// checkCreatedTopics checks that the processor created its output topics
// with the input's partition count, and the changelog compacted.
func checkCreatedTopics(t *testing.T, d *deployment, partitions int) {
	t.Helper()
	adm := harness.NewAdmin(t, d.seeds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, d.alerts, d.dlq, d.late, d.changelog)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	for _, name := range []string{d.alerts, d.dlq, d.late, d.changelog} {
		td, ok := details[name]
		if !ok || td.Err != nil {
			t.Errorf("topic %s was not created: %v", name, td.Err)
			continue
		}
		if len(td.Partitions) != partitions {
			t.Errorf("topic %s has %d partitions, want %d (the input's)", name, len(td.Partitions), partitions)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, d.changelog)
	if err != nil {
		t.Fatalf("describe %s: %v", d.changelog, err)
	}
	rc, err := rcs.On(d.changelog, nil)
	if err != nil {
		t.Fatalf("describe %s: %v", d.changelog, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() != "compact" {
			t.Errorf("changelog %s has cleanup.policy %q, want compact", d.changelog, c.MaybeValue())
		}
	}
}
