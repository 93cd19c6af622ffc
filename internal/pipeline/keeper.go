package pipeline

import (
	"fmt"
	"slices"

	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/rules"
)

// DedupGroup is one group of the aggregating rules over an input
// partition whose dedup sets share one store (NewPartitionShared): the
// rules with the same dedup share key, at most dedup.MaxViews of them per
// group, in the order given.
type DedupGroup struct {
	Key     string // the share key (DedupShareKey) of every member
	Chunk   int    // which group of that key: 0, then 1 after dedup.MaxViews members, ...
	Members []int  // indexes into the stages given to DedupGroups, increasing
}

// DedupShareKey groups the rules whose dedup sets can share a store: the
// same horizon (a store has one) and the same watermark strategy, so that
// their watermarks move together and an id is held no longer than each
// needs it. It is stable across builds (a DedupKeeper is named after it).
func DedupShareKey(c *rules.Compiled) string {
	w := c.Rule.Watermark
	return fmt.Sprintf("h=%d wm=%s/%d/%g/%d/%d/%d", c.DedupHorizonMs, w.Strategy, w.Delay.Ms(), w.Percentile, w.Min.Ms(), w.Max.Ms(), w.Sample)
}

// DedupGroups returns the groups in which NewPartitionShared, called for
// stages in this order with one DedupShare, shares the aggregating rules'
// dedup stores (sliding rules deduplicate inside their window state and
// are in none).
func DedupGroups(stages []*Stage) []DedupGroup {
	rs := make([]*rules.Compiled, len(stages))
	for i, s := range stages {
		rs[i] = s.c
	}
	return DedupGroupsOf(rs)
}

// DedupGroupsOf is DedupGroups of the stages of rs.
func DedupGroupsOf(rs []*rules.Compiled) []DedupGroup {
	var gs []DedupGroup
	last := map[string]int{} // key -> index in gs of its newest group
	for i, r := range rs {
		if r.Rule.Window.Type == rules.Sliding {
			continue
		}
		key := DedupShareKey(r)
		g, ok := last[key]
		if !ok || len(gs[g].Members) == dedup.MaxViews {
			chunk := 0
			if ok {
				chunk = gs[g].Chunk + 1
			}
			gs = append(gs, DedupGroup{Key: key, Chunk: chunk})
			g = len(gs) - 1
			last[key] = g
		}
		gs[g].Members = append(gs[g].Members, i)
	}
	return gs
}

// DedupKeeper persists the dedup store shared by one group of aggregating
// rules over one input partition (DedupGroups) as one set of entries for
// all of them: each remembered id once, with the names of the rules that
// remember it (package dedup, shared bucket value), instead of once per
// rule. The members then write no dedup entries of their own (Dirty).
//
// Its entries are named like a member's own dedup entries ("d", 8-byte
// bucket, key: dedupName); Dirty, Encode and Load work as a Partition's
// Dirty, EncodeKey and LoadKey do. A member's own dedup entries, written
// before its group had a keeper, are loaded by the member (LoadKey) and
// taken over: OwnDedup lists them for the caller to delete from the
// member's store, and the keeper writes their buckets at the next commit.
type DedupKeeper struct {
	base   *dedup.Set
	names  []string // by view slot of base's store
	byName map[string]*dedup.Set
	extra  map[string]bool // entries to write at the next commit besides the dirty buckets
}

// NewDedupKeeper returns the keeper of members, every aggregating rule
// whose dedup set is a view of one store (a DedupGroup), named by names
// (distinct, non-empty: the rules' "<id>.v<version>"). Loading the
// members' own entries must be finished.
func NewDedupKeeper(members []*Partition, names []string) (*DedupKeeper, error) {
	if len(members) == 0 || len(members) != len(names) {
		return nil, fmt.Errorf("pipeline: dedup keeper of %d rules with %d names", len(members), len(names))
	}
	if members[0].dd == nil {
		return nil, fmt.Errorf("pipeline: dedup keeper of a sliding rule (%s)", names[0])
	}
	base := members[0].dd
	views := base.Views()
	if len(views) != len(members) {
		return nil, fmt.Errorf("pipeline: dedup keeper of %d rules whose store has %d views", len(members), len(views))
	}
	k := &DedupKeeper{base: base, names: make([]string, len(views)), byName: map[string]*dedup.Set{}, extra: map[string]bool{}}
	for i, m := range members {
		if m.dd == nil || !m.dd.Shares(base) {
			return nil, fmt.Errorf("pipeline: dedup keeper: rule %s does not share the group's store", names[i])
		}
		if names[i] == "" || k.byName[names[i]] != nil {
			return nil, fmt.Errorf("pipeline: dedup keeper: rule name %q empty or repeated", names[i])
		}
		slot := slices.Index(views, m.dd)
		k.names[slot] = names[i]
		k.byName[names[i]] = m.dd
		for _, n := range m.ownDedup {
			k.extra[n] = true
		}
		m.kept = true
	}
	return k, nil
}

// Dirty returns the names of the entries changed since the members' last
// ClearDirty (and the members' own entries taken over), sorted. A name
// whose Encode is nil was deleted: the caller writes a tombstone.
func (k *DedupKeeper) Dirty() []string {
	refs := k.base.StoreDirtyBuckets()
	names := make([]string, 0, len(refs)+len(k.extra))
	for _, r := range refs {
		names = append(names, dedupName(r))
	}
	for n := range k.extra {
		names = append(names, n)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// ClearDirty forgets the taken-over entries (after a commit; the members'
// ClearDirty clears the rest).
func (k *DedupKeeper) ClearDirty() { clear(k.extra) }

// Encode encodes the named entry (nil: deleted).
func (k *DedupKeeper) Encode(name string) []byte {
	r, ok := parseDedupName(name)
	if !ok {
		return nil
	}
	return k.base.EncodeShared(r.Key, r.Bucket, k.names)
}

// Load restores the named entry into the members it names; names of rules
// that are not members any more are skipped (and the entry rewritten
// without them at the next commit). The members' watermarks should be
// loaded first: what has expired for a member is forgotten at once.
func (k *DedupKeeper) Load(name string, data []byte) error {
	r, ok := parseDedupName(name)
	if !ok {
		return fmt.Errorf("pipeline: dedup keeper entry %q: a dedup entry name is d, 8 bytes of bucket and the key", name)
	}
	return k.base.LoadShared(r.Key, r.Bucket, data, k.byName)
}

// OwnDedup returns the names of the rule's own dedup entries it loaded
// (LoadKey), written before its dedup store had a keeper: once a
// DedupKeeper took them over, the caller deletes them from the rule's
// store at the next commit.
func (w *Partition) OwnDedup() []string { return w.ownDedup }
