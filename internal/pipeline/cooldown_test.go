package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/rules"
)

// A per-key cooldown suppresses whole alerts: an alert that opens while
// its key cools down is never emitted (no revision of it at all); every
// emitted alert is emitted exactly as without the cooldown; a key alerts
// again once the watermark passed its last alert's end + cooldown; and the
// cooldown state survives restores (persisted in the extra entry).
func TestCooldown(t *testing.T) {
	for _, kind := range []string{rules.Sliding, rules.Tumbling} {
		t.Run(kind, func(t *testing.T) {
			mk := func(cool time.Duration) *Stage {
				c := compileRule(t, func(r *rules.Rule) {
					r.Cooldown = rules.Duration(cool)
					if kind == rules.Tumbling {
						r.Window = rules.Window{Type: rules.Tumbling, Size: rules.Duration(time.Minute)}
						r.Threshold = "count >= 3"
					}
				})
				s, err := NewRuleStage(c, Options{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			log := troubledLine(5, 30_000)
			run := func(s *Stage, restoreEvery int) []Output {
				var out []Output
				acct := Accounting{Version: 1}
				w := s.NewPartition()
				store := map[string][]byte{}
				for i, in := range log {
					if restoreEvery > 0 && i%restoreEvery == restoreEvery-1 {
						w.Sweep()
						w = persist(t, s, w, store)
					}
					s.Process(w, in, &acct, func(o Output) {
						if o.Kind == Alert {
							out = append(out, o)
						}
					})
				}
				return out
			}
			free := run(mk(0), 0)
			cooled := run(mk(10*time.Minute), 0)
			restored := run(mk(10*time.Minute), 613)
			if len(cooled) != len(restored) {
				t.Fatalf("restored run: %d alert revisions, uninterrupted %d", len(restored), len(cooled))
			}
			for i := range cooled {
				if !slices.Equal(cooled[i].Value, restored[i].Value) {
					t.Fatalf("restored run differs at revision %d", i)
				}
			}
			byID := func(outs []Output) (map[string][][]byte, map[string][]string) {
				m := map[string][][]byte{}
				keys := map[string][]string{}
				for _, o := range outs {
					a, err := alerts.Decode(o.Value)
					if err != nil {
						t.Fatal(err)
					}
					if len(m[a.AlertID]) == 0 {
						keys[a.MachineID] = append(keys[a.MachineID], a.AlertID)
					}
					m[a.AlertID] = append(m[a.AlertID], o.Value)
				}
				return m, keys
			}
			all, _ := byID(free)
			shown, keys := byID(cooled)
			for id, revs := range shown {
				if len(all[id]) != len(revs) {
					t.Fatalf("alert %s: %d revisions emitted, %d without the cooldown", id, len(revs), len(all[id]))
				}
				for i := range revs {
					if !slices.Equal(revs[i], all[id][i]) {
						t.Fatalf("alert %s revision %d differs from the run without the cooldown", id, i)
					}
				}
			}
			again := 0
			for _, ids := range keys {
				if len(ids) > 1 {
					again++
				}
			}
			if len(shown) >= len(all) || again == 0 {
				t.Fatalf("%d of %d alerts shown, %d keys alerted more than once: the cooldown did not act, or never ended", len(shown), len(all), again)
			}
			t.Logf("%d of %d alerts shown; %d keys alerted again after cooling down", len(shown), len(all), again)
		})
	}
}
