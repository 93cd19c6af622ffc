package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
)

// expected computes, from the input alone, which records the processor
// must have dead-lettered and why: the oracle of the inspect tests.
func expected(t *testing.T, cfg config.Config) map[string]*kgo.Record {
	t.Helper()
	valid := event.NewValidator(event.JSONDecoder{}, event.Options{MaxFutureSkewMs: cfg.Rule.MaxFutureSkew.Milliseconds()})
	out := map[string]*kgo.Record{} // "<partition>@<offset>" -> input record (reason in Context)
	for _, r := range readCommitted(t, cfg, cfg.Topics.Input) {
		if _, verr := valid.Check(r.Key, r.Value, r.Timestamp.UnixMilli()); verr != nil {
			r.Context = context.WithValue(context.Background(), reasonKey{}, string(verr.Reason))
			out[fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)] = r
		}
	}
	return out
}

type reasonKey struct{}

func reasonOf(r *kgo.Record) string { return r.Context.Value(reasonKey{}).(string) }

func TestInspectProcessedDLQ(t *testing.T) {
	cfg := processed(t, 3000)
	want := expected(t, cfg)
	wantReason, wantSource := map[string]int{}, map[string]int{}
	for _, r := range want {
		wantReason[reasonOf(r)]++
		wantSource[fmt.Sprintf("%s/%d", r.Topic, r.Partition)]++
	}
	if len(wantReason) < 4 {
		t.Fatalf("the simulated input has too few kinds of poison: %v", wantReason)
	}

	sum, err := Inspect(context.Background(), InspectOptions{Config: cfg, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sum.String())
	if sum.Read != len(want) || sum.Selected != len(want) || fmt.Sprint(sum.ByReason) != fmt.Sprint(wantReason) ||
		fmt.Sprint(sum.BySource) != fmt.Sprint(wantSource) || sum.ReplayedBefore != 0 {
		t.Fatalf("summary %+v\nwant %d letters, by reason %v, by source %v", sum, len(want), wantReason, wantSource)
	}
	// Every letter names the one rule that wrote it (dlq.rules).
	if fmt.Sprint(sum.ByRule) != fmt.Sprintf("map[%s@%d:%d]", cfg.Rule.ID, cfg.Rule.Version, len(want)) {
		t.Errorf("by rule version %v, want all %d letters of %s@%d", sum.ByRule, len(want), cfg.Rule.ID, cfg.Rule.Version)
	}
	if !strings.Contains(sum.String(), "rules: "+cfg.Rule.ID+"@") {
		t.Errorf("samples do not show their rules:\n%s", sum)
	}
	for reason, samples := range sum.Samples {
		if len(samples) != min(2, wantReason[reason]) {
			t.Errorf("%s: %d samples, want %d", reason, len(samples), min(2, wantReason[reason]))
		}
		for _, s := range samples {
			src := want[s.Source]
			switch {
			case src == nil:
				t.Errorf("%s sample %s: source %s is not a poison input record", reason, s.DLQ, s.Source)
			case reasonOf(src) != reason || s.Key != Excerpt(src.Key, 64) || s.Value != Excerpt(src.Value, 200) ||
				s.ValueBytes != len(src.Value) || !s.SourceTime.Equal(src.Timestamp) || s.Detail == "":
				t.Errorf("%s sample %+v does not describe its input record %s", reason, s, src.Value)
			}
			if len(s.Value) > 200+len("... (99999 bytes)") {
				t.Errorf("sample value not truncated: %d bytes", len(s.Value))
			}
		}
	}
	if len(sum.Samples) != len(wantReason) {
		t.Errorf("samples of %d reasons, want %d", len(sum.Samples), len(wantReason))
	}
	first, last := time.Time{}, time.Time{}
	for _, r := range want {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
	}
	if !sum.SourceTime.First.Equal(first) || !sum.SourceTime.Last.Equal(last) {
		t.Errorf("source time span %s, want %s .. %s", sum.SourceTime, first, last)
	}

	// JSON carries the same.
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || back.Selected != sum.Selected || fmt.Sprint(back.ByReason) != fmt.Sprint(sum.ByReason) ||
		len(back.Samples) != len(sum.Samples) {
		t.Fatalf("JSON round trip: %v\n%s", err, b)
	}

	// A reason and a time range narrow it; counts follow the oracle.
	mid := first.Add(last.Sub(first) / 2)
	sel := Selection{Reasons: []string{"invalid_field", "decode_error"}, From: mid}
	n := 0
	for _, r := range want {
		if l := (Letter{Reason: reasonOf(r), SourceOK: true, SourceTimestamp: r.Timestamp}); sel.Match(l) {
			n++
		}
	}
	part, err := Inspect(context.Background(), InspectOptions{Config: cfg, Selection: sel, Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if part.Read != len(want) || part.Selected != n || n == 0 || n == len(want) ||
		part.ByReason["invalid_field"]+part.ByReason["decode_error"] != n || part.SourceTime.First.Before(mid) {
		t.Fatalf("selection %s: %+v, want %d selected", sel, part, n)
	}
	if !strings.Contains(part.String(), "source time [") {
		t.Errorf("rendering does not name the selection:\n%s", part)
	}
}

// Direct letters: records in an aborted transaction are never counted, and
// an empty topic is no error.
func TestInspectReadCommittedOnly(t *testing.T) {
	cfg := newCluster(t)
	sum, err := Inspect(context.Background(), InspectOptions{Config: cfg, Samples: 3})
	if err != nil || sum.Read != 0 || !strings.Contains(sum.String(), "0 committed records read") {
		t.Fatalf("empty DLQ: %v %+v", err, sum)
	}
	produceLetters(t, cfg, someLetters(10, "decode_error", "clock_ahead"), someLetters(4, "too_large"))
	sum, err = Inspect(context.Background(), InspectOptions{Config: cfg, Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Read != 10 || sum.ByReason["decode_error"] != 5 || sum.ByReason["clock_ahead"] != 5 || sum.ByReason["too_large"] != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if len(sum.Samples["decode_error"]) != 3 {
		t.Fatalf("samples %+v", sum.Samples)
	}
}
