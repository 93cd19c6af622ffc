package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/rules"
)

// FuzzLoadExtra: the extra state entry of the changelog (repartition
// sources, adaptive watermark sample, cooldowns) never panics on any bytes,
// and what it accepts re-encodes to the same bytes.
func FuzzLoadExtra(f *testing.F) {
	c := compileRule(f, func(r *rules.Rule) {
		r.Cooldown = rules.Duration(time.Minute)
		r.Watermark = rules.Watermark{Strategy: rules.WatermarkAdaptive, Delay: rules.Duration(30 * time.Second),
			Percentile: 90, Max: rules.Duration(time.Minute), Sample: 4}
	})
	s, err := NewRuleStage(c, Options{})
	if err != nil {
		f.Fatal(err)
	}
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	for _, in := range troubledLine(1, 3000) {
		s.Process(w, in, &acct, func(Output) {})
	}
	w.marker(0, 2, 1000, false, 0)
	f.Add(w.EncodeExtra())
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 1, 0, 10, 1, 0, 1, 1, 'k', 4, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := s.NewPartition()
		if err := p.LoadExtra(data); err != nil {
			return
		}
		if got := p.EncodeExtra(); len(data) > 0 && !slices.Equal(got, data) {
			// Map order is canonicalised on encode; a decoded state must
			// re-encode to a state that decodes to the same.
			q := s.NewPartition()
			if err := q.LoadExtra(got); err != nil {
				t.Fatalf("re-encoded state does not load: %v", err)
			}
			if again := q.EncodeExtra(); !slices.Equal(again, got) {
				t.Fatalf("encoding is not stable:\n%x\n%x", got, again)
			}
		}
	})
}
