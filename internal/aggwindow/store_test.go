package aggwindow

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// memStore stands in for the store of a partition's entries: key entries
// by key, pane entries by pane, and the meta. persist writes what the
// partition reports dirty, a nil value deleting the entry (a tombstone).
type memStore struct {
	keys  map[string][]byte
	panes map[PaneRef][]byte
	meta  []byte
}

func newMemStore() *memStore {
	return &memStore{keys: map[string][]byte{}, panes: map[PaneRef][]byte{}}
}

// commit is what one persist wrote.
type commit struct {
	keys  []string
	panes []PaneRef
	meta  bool
	bytes int
}

// persist writes p's dirty entries and clears them.
func (s *memStore) persist(p *Partition) commit {
	keys, meta := p.Dirty()
	c := commit{keys: keys, panes: p.DirtyPanes(), meta: meta}
	for _, k := range keys {
		b := p.EncodeKey(k)
		c.bytes += len(b)
		if b != nil {
			s.keys[k] = b
		} else {
			delete(s.keys, k)
		}
	}
	for _, r := range c.panes {
		b := p.EncodePane(r.Key, r.Start)
		c.bytes += len(b)
		if b != nil {
			s.panes[r] = b
		} else {
			delete(s.panes, r)
		}
	}
	if meta {
		s.meta = p.EncodeMeta()
		c.bytes += len(s.meta)
	}
	p.ClearDirty()
	return c
}

// restore returns a fresh partition loaded from the store, the entries in
// an order rng picks (the meta anywhere among them; a store may return
// them in any order), and checks that loading marked nothing dirty.
func (s *memStore) restore(tb testing.TB, cfg Config, rng *rand.Rand) *Partition {
	tb.Helper()
	p := mustPartition(tb, cfg)
	var loads []func() error
	if s.meta != nil {
		loads = append(loads, func() error { return p.LoadMeta(s.meta) })
	}
	for k, b := range s.keys {
		loads = append(loads, func() error { return p.LoadKey(k, b) })
	}
	for r, b := range s.panes {
		loads = append(loads, func() error { return p.LoadPane(r.Key, r.Start, b) })
	}
	rng.Shuffle(len(loads), func(i, j int) { loads[i], loads[j] = loads[j], loads[i] })
	for _, load := range loads {
		if err := load(); err != nil {
			tb.Fatalf("restore: %v", err)
		}
	}
	if keys, meta := p.Dirty(); len(keys) > 0 || meta || len(p.DirtyPanes()) > 0 {
		tb.Fatalf("restore marked entries dirty: keys %v, panes %v, meta %v", keys, p.DirtyPanes(), meta)
	}
	return p
}

// entries returns the store's contents by entry name.
func (s *memStore) entries() map[string]string {
	m := map[string]string{}
	for k, b := range s.keys {
		m["w"+k] = string(b)
	}
	for r, b := range s.panes {
		m[fmt.Sprintf("p%d/%s", r.Start, r.Key)] = string(b)
	}
	if s.meta != nil {
		m["m"] = string(s.meta)
	}
	return m
}

// entriesOf returns every entry of p's current state, as memStore.entries
// names them (the meta only once W moved).
func entriesOf(p *Partition) map[string]string {
	m := map[string]string{}
	for k, ks := range p.keys {
		if b := p.EncodeKey(k); b != nil {
			m["w"+k] = string(b)
		}
		for _, pn := range ks.panes {
			m[fmt.Sprintf("p%d/%s", pn.start, k)] = string(p.EncodePane(k, pn.start))
		}
	}
	if p.wm != NoWatermark {
		m["m"] = string(p.EncodeMeta())
	}
	return m
}

// describe renders p's windows and panes (what Stats does not show) for
// comparing a restored partition with the one persisted.
func describe(p *Partition) string {
	var lines []string
	for k, ks := range p.keys {
		for _, wn := range ks.wins {
			v := math.NaN()
			if wn.agg.count > 0 {
				v = wn.agg.value(p.cfg.Fn)
			}
			lines = append(lines, fmt.Sprintf("%s win %d last %d n=%d agg=%x ev=%v fired=%v %q r%d",
				k, wn.start, wn.last, p.count(wn), math.Float64bits(v), evIDs(wn.evidence), wn.fired, wn.alertID, wn.rev))
		}
		for _, pn := range ks.panes {
			lines = append(lines, fmt.Sprintf("%s pane %d n=%d agg=%x ev=%v", k, pn.start, pn.agg.count, math.Float64bits(pn.agg.value(p.cfg.Fn)), evIDs(pn.evidence)))
		}
	}
	slices.Sort(lines)
	return fmt.Sprintf("W=%d %+v\n%s", p.wm, p.Stats(), strings.Join(lines, "\n"))
}

// sameState fails unless restored equals the persisted partition ref in
// its windows, panes, stats and entries.
func sameState(tb testing.TB, restored, ref *Partition) {
	tb.Helper()
	if a, b := describe(restored), describe(ref); a != b {
		tb.Fatalf("restored state differs:\n got %s\nwant %s", a, b)
	}
	if a, b := entriesOf(restored), entriesOf(ref); !maps.Equal(a, b) {
		tb.Fatalf("restored entries differ:\n got %q\nwant %q", a, b)
	}
}
