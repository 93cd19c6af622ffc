package window

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/vibeline/processor/internal/codec"
)

// Helpers for the persisted layout (encoding.go): a test store of entries,
// a key's complete set of entries, loading them in any order, and the
// encoder of format version 1, kept to test the upgrade from it.

// entryName names one persisted entry in the tests' stores: the key entry
// of key (kind 'k', bucket 0), or a bucket entry (kind EventsBucket or
// DedupBucket).
type entryName struct {
	kind   byte
	key    string
	bucket int64
}

func keyEntry(key string) entryName { return entryName{'k', key, 0} }

func bucketEntry(r BucketRef) entryName { return entryName{r.Kind, r.Key, r.Bucket} }

func (n entryName) ref() BucketRef { return BucketRef{Kind: n.kind, Key: n.key, Bucket: n.bucket} }

func (n entryName) String() string {
	if n.kind == 'k' {
		return fmt.Sprintf("key %q", n.key)
	}
	return fmt.Sprintf("%c bucket %d of %q", n.kind, n.bucket, n.key)
}

func cmpEntryName(a, b entryName) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.kind, b.kind), cmp.Compare(a.bucket, b.bucket))
}

// keyBuckets returns every bucket entry the key's state has.
func keyBuckets(p *Partition, key string) []BucketRef {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	var out []BucketRef
	add := func(kind byte, b int64) {
		if n := len(out); n == 0 || out[n-1].Kind != kind || out[n-1].Bucket != b {
			out = append(out, BucketRef{Kind: kind, Key: key, Bucket: b})
		}
	}
	for _, e := range ks.events {
		add(EventsBucket, floorDiv(e.TS, p.evB))
	}
	for _, e := range ks.seenBy {
		add(DedupBucket, floorDiv(e.ts, p.ddB))
	}
	return out
}

// snapshot returns every entry of p's state (version 2), whatever is dirty.
func snapshot(p *Partition) map[entryName][]byte {
	m := map[entryName][]byte{}
	for key := range p.keys {
		maps.Copy(m, snapshotKey(p, key))
	}
	return m
}

// snapshotKey returns the entries of one key.
func snapshotKey(p *Partition, key string) map[entryName][]byte {
	if p.keys[key] == nil {
		return nil
	}
	m := map[entryName][]byte{keyEntry(key): p.EncodeKey(key)}
	for _, r := range keyBuckets(p, key) {
		m[bucketEntry(r)] = p.EncodeBucket(r)
	}
	return m
}

// persistDirty writes p's dirty entries into store (nil deletes), as
// package state does, and returns the bytes written (values only).
func persistDirty(p *Partition, store map[entryName][]byte) int {
	n := 0
	put := func(name entryName, v []byte) {
		n += len(v)
		if v == nil {
			delete(store, name)
		} else {
			store[name] = v
		}
	}
	keys, _ := p.Dirty()
	for _, k := range keys {
		put(keyEntry(k), p.EncodeKey(k))
	}
	for _, r := range p.DirtyBuckets() {
		put(bucketEntry(r), p.EncodeBucket(r))
	}
	return n
}

// loadEntries loads the entries of store into p in the order shuffle leaves
// them (sorted when shuffle is nil), then finishes the load.
func loadEntries(p *Partition, store map[entryName][]byte, shuffle func(n int, swap func(i, j int))) error {
	names := slices.SortedFunc(maps.Keys(store), cmpEntryName)
	if shuffle != nil {
		shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	}
	for _, n := range names {
		var err error
		if n.kind == 'k' {
			err = p.LoadKey(n.key, store[n])
		} else {
			err = p.LoadBucket(n.ref(), store[n])
		}
		if err != nil {
			return err
		}
	}
	return p.FinishLoad()
}

// loadKeyNow loads one key entry (typically a version-1 value, which holds
// the key's whole state) and finishes the load.
func loadKeyNow(p *Partition, key string, data []byte) error {
	if err := p.LoadKey(key, data); err != nil {
		p.pending = nil
		return err
	}
	return p.FinishLoad()
}

// shuffler returns a Fisher-Yates shuffle driven by rnd (values in [0, 1)).
func shuffler(rnd func() float64) func(n int, swap func(i, j int)) {
	return func(n int, swap func(i, j int)) {
		for i := n - 1; i > 0; i-- {
			swap(i, int(rnd()*float64(i+1)))
		}
	}
}

// encodeKeyV1 is the key encoding of format version 1, as the builds before
// bucket entries wrote it (their EncodeKey, unchanged): the key's whole
// state in one value. testdata/legacy_v1.golden pins its bytes.
func encodeKeyV1(p *Partition, key string) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	size := 16
	for i := range ks.events {
		size += 32 + len(ks.events[i].EventID) + len(ks.events[i].SensorID)
	}
	for _, e := range ks.seenBy {
		size += 12 + len(e.id)
	}
	b := make([]byte, 0, size)
	b = append(b, legacyKeyVersion)
	b = codec.AppendUvarint(b, uint64(len(ks.events)))
	for i := range ks.events {
		b = appendEvent(b, &ks.events[i])
	}
	b = codec.AppendUvarint(b, uint64(len(ks.seenBy)))
	for _, e := range ks.seenBy {
		b = codec.AppendVarint(b, e.ts)
		b = codec.AppendString(b, e.id)
	}
	b = codec.AppendUvarint(b, uint64(len(ks.open)))
	for _, inc := range ks.open {
		b = codec.AppendString(b, inc.alertID)
		b = codec.AppendUvarint(b, uint64(inc.rev))
		b = codec.AppendVarint(b, inc.start)
		b = codec.AppendVarint(b, inc.end)
		b = codec.AppendUvarint(b, uint64(inc.count))
		b = codec.AppendUvarint(b, uint64(inc.pruned))
		b = codec.AppendUvarint(b, uint64(len(inc.evidence)))
		for i := range inc.evidence {
			b = appendEvent(b, &inc.evidence[i])
		}
	}
	return b
}

// legacyStore is p's state as format version 1 stored it: one value per
// key.
func legacyStore(p *Partition) map[entryName][]byte {
	m := map[entryName][]byte{}
	for key := range p.keys {
		m[keyEntry(key)] = encodeKeyV1(p, key)
	}
	return m
}

// checkStoreMatches fails unless store holds exactly p's state: every entry
// of every key (none missing: a missed dirty mark), nothing else (a missed
// tombstone), byte for byte.
func checkStoreMatches(tb testing.TB, p *Partition, store map[entryName][]byte) {
	tb.Helper()
	want := snapshot(p)
	for n, v := range want {
		got, ok := store[n]
		if !ok {
			tb.Fatalf("%v has state but was never persisted (missed dirty mark)", n)
		}
		if string(got) != string(v) {
			tb.Fatalf("%v: stored and in-memory encodings differ (missed dirty mark or non-canonical encoding)", n)
		}
	}
	for n := range store {
		if _, ok := want[n]; !ok {
			tb.Fatalf("%v is stored but holds nothing (missed tombstone)", n)
		}
	}
}
