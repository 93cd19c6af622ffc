package consume

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/state"
	"github.com/vibeline/processor/internal/window"
)

// Changelog record keys. A rule's changelog partition mirrors the rule's
// state of the input partition with the same number.
//
// A sliding rule's bucket entries (pipeline.Partition.DirtyBuckets: a
// kind byte, 8 bytes of time bucket, the key) have a name space of their
// own: under "k" they could equal an entry named by a key (a sliding
// rule's "k" names are its keys, any non-empty string up to 1024 bytes,
// "e\x80\x00..." included). Under "s" no record key is named by a key
// alone, and the Pebble store keeps record keys as they are (state, "p" +
// partition + "s" + record key), so no two entries meet there either.
const (
	changelogKeyPrefix    = 'k' // "k" + entry name: one key's window state (pipeline.Partition names)
	changelogBucketPrefix = 's' // "s" + bucket entry name: one time bucket of a sliding rule key (above)
	changelogMeta         = "m" // the partition's window meta (watermark)
	changelogAcct         = "a" // the partition's accounting record, JSON
	changelogHash         = "h" // the rule's state hash (config.StateHash) when the state was written
	changelogExtra        = "x" // the partition's extra state (pipeline.Partition.EncodeExtra)
	// changelogKept names the dedup keeper that persists an aggregating
	// rule's dedup ids (task.keeper), whose own state then holds none.
	// Processors before keepers refuse it ("unknown state entry"), rather
	// than run the rule with no ids.
	changelogKept = "D"
)

// DecodeAccounting parses a changelog accounting record.
func DecodeAccounting(b []byte) (pipeline.Accounting, error) {
	var a pipeline.Accounting
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("consume: decode accounting record: %w", err)
	}
	if a.Version != 1 {
		return a, fmt.Errorf("consume: accounting record version %d, want 1", a.Version)
	}
	return a, nil
}

// pkey names an input partition.
type pkey struct {
	topic string
	id    int32
}

// part is one owned input partition: the state of every rule that reads it.
// Only Run's goroutine, or the one worker that runs the partition's current
// job (Processor.dispatch), touches it; Run's goroutine only between
// batches (after drain) or for the open batch's bookkeeping (touched,
// lastJob).
type part struct {
	pkey
	src *source
	rs  []*rulePart // one per src.tasks, same order
	ks  []*rulePart // one per src.keepers, same order: kp set, win nil
	// clBuf is changelogEntries' buffer, reused batch after batch.
	clBuf []clEntry

	endOffset  int64     // last stable offset at the last fetch
	restoredAt int64     // the group's committed offset when it was restored (0: none)
	lastRecord time.Time // record timestamp of the last record consumed

	// Of a source partition with repartitioned rules (Processor.markers),
	// as of the open batch and as last committed (an abort goes back).
	fwd, committedFwd fwdState

	// Of the open batch:
	stats   batchStats
	touched bool
	lastJob chan struct{} // closed when its last dispatched job finished (Processor.dispatch)
	// holding is set by a job whose records were polled while the
	// previous batch's End ran (Processor.endBatch): their outputs are
	// held here until the next Begin, in order.
	holding bool
	held    []*kgo.Record

	// Of the batch being committed (settled by Processor.settle, read
	// once it committed): its stats, forwarder state, summary and fetch
	// position (for the status page).
	done   batchStats
	staged stagedState

	// refs are the cached key lookups of the aggregating rules (at least
	// two: aggIdx of each; refsFor), one per rule and key; cleared once
	// they hold maxKeyRefs keys.
	refs    map[string][]aggwindow.KeyRef
	nAgg    int
	aggRule int // index in rs of the first aggregating rule

	// chunk is handleRecords' scratch space.
	chunk chunk
}

// stagedState is what Processor.settle takes of a partition for the
// bookkeeping of the staged batch once it committed.
type stagedState struct {
	fwd        fwdState
	wm         int64 // summary
	st         pipeline.Stats
	endOffset  int64
	lastRecord time.Time
}

// fwdState is what a source partition's forwarder knows.
type fwdState struct {
	next     int64     // offset after the last record handled
	max      int64     // largest event time forwarded (NoWatermark: none)
	active   time.Time // when it last forwarded a record
	sent     bool      // a marker was sent, with:
	sentMax  int64
	sentIdle bool
}

// rulePart is one rule's state over one input partition, or a dedup
// keeper's (kp set, win nil; no accounting, hash or meta of its own).
type rulePart struct {
	t      *task
	win    *pipeline.Partition
	kp     *pipeline.DedupKeeper
	aggIdx int   // its KeyRef in part.refs' slices (-1: not an aggregating rule)
	ddIdx  int   // the index in part.ks of the keeper of its dedup store (-1: none)
	target int64 // committed changelog position (next offset)
	acct   pipeline.Accounting
	hashOK bool // the committed state carries the rule's hash
	// keptBy is the keeper the committed state names (changelogKept), ""
	// before the rule's first commit with a keeper.
	keptBy string
	// dropOwn are the record keys of the rule's own dedup entries, written
	// before it had a keeper, which the next commit deletes (with their
	// chunks) as the keeper takes them over; found again at every load
	// until a commit deleted them.
	dropOwn [][]byte
	// tombstones are changelog keys of an earlier history, deleted by the
	// first commit of a partition started from scratch (restorePartition).
	tombstones [][]byte
	// rewrite are changelog keys that records past the committed position
	// wrote: at_least_once flushes an aborted batch's changelog records
	// (alo.End), which a later committed position then covers although
	// the committed state is not theirs. The next commit writes each such
	// key's committed value again (the local store's, or a tombstone),
	// before its own entries: else a restore would load, say, a sliding
	// key's bucket entry of the aborted batch beside the committed key
	// entry (a key whose counts no longer match, refused as corrupt), or
	// a key only the aborted batch wrote.
	rewrite [][]byte
	// chunks are the committed entries written in chunks (chunk.go): record
	// key -> chunk count, rebuilt from the manifests at load.
	chunks map[string]int

	// Of the open batch:
	lastCL      *kgo.Record         // last changelog record produced in this batch
	batchAcct   pipeline.Accounting // acct as it will be once the batch commits
	stagedAcct  pipeline.Accounting // batchAcct when the batch was staged (Processor.settle)
	stagedRisk  int                 // the window's alerts-at-risk count then (TakeAtRisk)
	batchChunks map[string]int      // chunk counts the batch changes (0: none any more)
	chunked     int                 // entries the batch writes in chunks
}

// ErrRuleChanged is returned when a rule's stored state was written by a
// different definition of the same rule id and version.
var ErrRuleChanged = fmt.Errorf("consume: rule changed without a version bump")

// stateHashPrefix marks the value of the "h" entry as a state hash
// (config.StateHash, which covers rule.max_future_skew). Processors before
// it stored the rule's hash alone, without a prefix.
const stateHashPrefix = "2:"

// hashMatches reports whether the stored "h" value names this rule's
// definition. A legacy value (the rule's hash alone, written before the
// skew was hashed) matches when it is the rule's hash: the skew it ran
// with is not known, and is taken to be unchanged (legacy reports it, and
// the next commit rewrites it as a state hash).
func (t *task) hashMatches(stored string) (same, legacy bool) {
	if stored == "" {
		return true, false // no state yet
	}
	if h, ok := strings.CutPrefix(stored, stateHashPrefix); ok {
		return h == t.hash, false
	}
	// (Builds between the skew's hashing and the prefix wrote the state
	// hash without it.)
	return stored == t.rule.Hash || stored == t.hash, true
}

// changedHint is what to do about state of another definition.
func (t *task) changedHint() string {
	if t.clFixed {
		return "topics.changelog is set and does not follow rule.version: give a new rule version a new changelog topic there, then replay (processor replay); or restore the old definition"
	}
	return "bump the rule's version and replay (processor replay), or restore the old definition"
}

// loadRulePart builds a rule's in-memory state of partition p from its
// local store, which holds exactly its committed state. share is the
// partition's dedup sharing (pipeline.DedupShare): every rule of the
// partition is loaded into it, all or none.
func loadRulePart(t *task, p int32, share pipeline.DedupShare) (*rulePart, error) {
	rp := &rulePart{t: t, win: t.stage.NewPartitionShared(share), acct: pipeline.Accounting{Version: 1}, chunks: map[string]int{}}
	target, _, err := t.store.Checkpoint(p)
	if err != nil {
		return nil, err
	}
	rp.target = target
	// The hash first: state written by another definition may not even
	// decode under this one.
	h, err := t.store.Get(p, []byte(changelogHash))
	if err != nil {
		return nil, fmt.Errorf("consume: load rule %s partition %d: %w", t.ns, p, err)
	}
	stored := string(h)
	same, legacy := t.hashMatches(stored)
	if stored != "" && !same {
		return nil, fmt.Errorf("%w: rule %s version %d: its state (changelog %s, partition %d) was written by a rule with hash %.16s, this one has hash %.16s (the hash covers the rule's definition and rule.max_future_skew); %s",
			ErrRuleChanged, t.rule.Rule.ID, t.rule.Rule.Version, t.cl, p, strings.TrimPrefix(stored, stateHashPrefix), t.hash, t.changedHint())
	}
	err = rp.scan(p, func(name, value []byte) error {
		switch {
		case string(name) == changelogMeta:
			return rp.win.LoadMeta(value)
		case string(name) == changelogAcct:
			a, err := DecodeAccounting(value)
			rp.acct = a
			return err
		case string(name) == changelogExtra:
			return rp.win.LoadExtra(value)
		case string(name) == changelogHash:
			return nil
		case string(name) == changelogKept:
			rp.keptBy = string(value)
			return nil
		case len(name) > 0 && name[0] == changelogKeyPrefix:
			return rp.win.LoadKey(string(name[1:]), value)
		case len(name) > 0 && name[0] == changelogBucketPrefix:
			return rp.win.LoadBucket(string(name[1:]), value)
		default:
			return fmt.Errorf("unknown state entry %q", name)
		}
	})
	if err == nil {
		err = rp.win.FinishLoad() // the entries of a key are checked together
	}
	if errors.Is(err, aggwindow.ErrUnknownVersion) || errors.Is(err, window.ErrUnknownVersion) || errors.Is(err, dedup.ErrUnknownVersion) {
		return nil, fmt.Errorf("consume: load rule %s partition %d: %w; the state was written in a format this processor does not read (for example tumbling and hopping windows before format version 2, docs/RUNBOOK.md \"State format upgrades\"): bump the rule's version and replay (processor replay), or run the processor that wrote it", t.ns, p, err)
	}
	if err != nil {
		return nil, fmt.Errorf("consume: load rule %s partition %d: %w", t.ns, p, err)
	}
	rp.hashOK = stored != "" && !legacy // a legacy hash is rewritten at the next commit
	if rp.keptBy != "" && (t.keeper == nil || rp.keptBy != t.keeper.ns) {
		want := "none"
		if t.keeper != nil {
			want = t.keeper.ns
		}
		return nil, fmt.Errorf("consume: load rule %s partition %d: its dedup ids are kept by %s, but this configuration keeps them in %s: run the configuration that wrote the state, or bump the rule's version and replay (processor replay)", t.ns, p, rp.keptBy, want)
	}
	rp.win.ClearLoaded()
	rp.batchAcct = rp.acct
	return rp, nil
}

// scan calls fn with every entry of rp's local store of partition p, a
// chunked value joined (its chunk count kept in rp.chunks). Chunks are
// read through their manifests: a chunk no manifest names is not state
// (at_least_once flushes an aborted batch's changelog records, and chunks
// of a larger value it wrote outlive the committed value that replaced
// it), and is deleted at the next commit (rp.tombstones).
func (rp *rulePart) scan(p int32, fn func(name, value []byte) error) error {
	st := rp.t.store
	var chunkNames []string
	named := map[string]bool{}
	err := st.Scan(p, func(name, value []byte) error {
		if isChunkKey(name) {
			chunkNames = append(chunkNames, string(name))
			return nil
		}
		if isManifest(value) {
			v, m, err := joinChunks(name, value, func(key []byte) ([]byte, error) { return st.Get(p, key) })
			if err != nil {
				return err
			}
			value = v
			rp.chunks[string(name)] = m.count
			for i := range m.count {
				named[string(chunkKey(name, i))] = true
			}
		}
		return fn(name, value)
	})
	for _, c := range chunkNames {
		if !named[c] {
			rp.tombstones = append(rp.tombstones, []byte(c))
		}
	}
	return err
}

// loadKeeperPart builds a dedup keeper's in-memory state of partition p:
// it takes over the dedup sets of its member rules (pt.rs, loaded) and
// loads its entries from its local store, which holds exactly its
// committed state. The members' own dedup entries, written before they had
// a keeper, are deleted from their changelogs at the next commit, which
// writes them into the keeper's.
func loadKeeperPart(t *task, p int32, pt *part) (*rulePart, error) {
	members := make([]*pipeline.Partition, len(t.group.Members))
	names := make([]string, len(t.group.Members))
	for i, m := range t.group.Members {
		members[i], names[i] = pt.rs[m].win, pt.rs[m].t.ns
	}
	kp, err := pipeline.NewDedupKeeper(members, names)
	if err != nil {
		return nil, fmt.Errorf("consume: load dedup keeper %s partition %d: %w", t.ns, p, err)
	}
	rp := &rulePart{t: t, kp: kp, chunks: map[string]int{}}
	if rp.target, _, err = t.store.Checkpoint(p); err != nil {
		return nil, err
	}
	err = rp.scan(p, func(name, value []byte) error {
		if len(name) == 0 || name[0] != changelogKeyPrefix {
			return fmt.Errorf("unknown dedup keeper entry %q", name)
		}
		return kp.Load(string(name[1:]), value)
	})
	if errors.Is(err, dedup.ErrUnknownVersion) {
		return nil, fmt.Errorf("consume: load dedup keeper %s partition %d: %w; the state was written in a format this processor does not read: run the processor that wrote it, or bump the versions of its rules and replay (processor replay)", t.ns, p, err)
	}
	if err != nil {
		return nil, fmt.Errorf("consume: load dedup keeper %s partition %d: %w", t.ns, p, err)
	}
	for _, m := range t.group.Members {
		mp := pt.rs[m]
		for _, n := range mp.win.OwnDedup() {
			mp.dropOwn = append(mp.dropOwn, append([]byte{changelogKeyPrefix}, n...))
		}
	}
	return rp, nil
}

// loadPart builds a partition's in-memory state from the local stores.
func loadPart(src *source, k pkey) (*part, error) {
	pt := &part{pkey: k, src: src, stats: newBatchStats(), done: newBatchStats()}
	pt.fwd.max = window.NoWatermark
	pt.committedFwd = pt.fwd
	share := pipeline.DedupShare{}
	for _, t := range src.tasks {
		rp, err := loadRulePart(t, k.id, share)
		if err != nil {
			return nil, err
		}
		rp.aggIdx = -1
		if rp.win.Aggregating() {
			if pt.nAgg == 0 {
				pt.aggRule = len(pt.rs)
			}
			rp.aggIdx = pt.nAgg
			pt.nAgg++
		}
		pt.rs = append(pt.rs, rp)
	}
	if pt.nAgg >= 2 {
		pt.refs = map[string][]aggwindow.KeyRef{}
	}
	for _, t := range src.keepers {
		rp, err := loadKeeperPart(t, k.id, pt)
		if err != nil {
			return nil, err
		}
		pt.ks = append(pt.ks, rp)
	}
	for _, rp := range pt.rs {
		rp.ddIdx = -1
	}
	for g, kp := range pt.ks {
		for _, m := range kp.t.group.Members {
			pt.rs[m].ddIdx = g
		}
	}
	return pt, nil
}

// maxKeyRefs bounds part.refs: a cache, cleared when it is full (keys that
// no longer come are dropped with it).
const maxKeyRefs = 1 << 16

// refsFor returns the KeyRefs of the record key of ev (by the first
// aggregating rule's key), or nil when fewer than two rules aggregate.
func (pt *part) refsFor(ev *event.Event) (string, []aggwindow.KeyRef) {
	if pt.refs == nil {
		return "", nil
	}
	key := pt.rs[pt.aggRule].t.stage.KeyOf(ev)
	refs := pt.refs[key]
	if refs == nil {
		if len(pt.refs) >= maxKeyRefs {
			clear(pt.refs)
		}
		refs = make([]aggwindow.KeyRef, pt.nAgg)
		pt.refs[key] = refs
	}
	return key, refs
}

// all returns the partition's rule parts, then its dedup keepers' parts.
func (pt *part) all() []*rulePart { return append(slices.Clip(pt.rs), pt.ks...) }

func (rp *rulePart) nextTarget() int64 {
	if rp.lastCL != nil {
		return rp.lastCL.Offset + 1
	}
	return rp.target
}

// store returns the rule part's local store.
func (rp *rulePart) store() *state.Store { return rp.t.store }

// batchStats are what a partition's records produced in the open batch,
// counted into the metrics and the status page when the batch commits.
type batchStats struct {
	alerts map[string]int // alert revisions by status
	dlq    map[string]int // dead letters by reason
	vals   [][]byte       // alert values, for the status page
	ts     []time.Time    // record timestamps of the records that caused alerts
}

func newBatchStats() batchStats {
	return batchStats{alerts: map[string]int{}, dlq: map[string]int{}}
}

func (b *batchStats) reset() {
	clear(b.alerts)
	clear(b.dlq)
	b.vals, b.ts = b.vals[:0], b.ts[:0]
}

// clEntry is one changelog entry of a rule's partition at a commit.
type clEntry struct {
	rp          *rulePart
	name, value []byte
}

// changelogEntries sweeps the state of every rule of the partition (and
// writes its dedup keepers' entries, after them) and
// returns what the batch changed, in order: per rule the committed values
// of the keys that records past the committed position wrote (rewrite),
// the tombstones of an
// earlier history (the first batch after a start from scratch), its dirty
// key entries and bucket entries, then the meta, extra, hash and
// accounting records. An entry
// longer than chunkBytes is written as chunks and a manifest, and the
// chunks an entry no longer uses are deleted (chunk.go). It touches only
// this partition's state, so partitions are encoded in parallel.
func (pt *part) changelogEntries() ([]clEntry, error) {
	out := pt.clBuf[:0] // the previous batch's, ended (endBatch)
	defer func() { pt.clBuf = out }()
	for _, rp := range pt.all() { // keepers last: after their members' Sweep
		rp.batchChunks, rp.chunked = nil, 0
		emit := func(name, value []byte) {
			had := rp.chunks[string(name)]
			var n int
			out, n = chunkedEntries(out, rp, name, value, had, chunkBytes)
			if n != had {
				if rp.batchChunks == nil {
					rp.batchChunks = map[string]int{}
				}
				rp.batchChunks[string(name)] = n
			}
			if n > 0 {
				rp.chunked++
			}
		}
		if len(rp.rewrite) > 0 {
			slices.SortFunc(rp.rewrite, bytes.Compare)
			rp.rewrite = slices.CompactFunc(rp.rewrite, bytes.Equal)
		}
		// (Partitions are encoded in parallel and read one local store
		// per rule: Pebble's Get is safe from several goroutines, and
		// nothing writes the store before the batch commits.)
		for _, k := range rp.rewrite { // first: tombstones and entries below win
			v, err := rp.store().Get(pt.id, k)
			if err != nil {
				return out, err
			}
			out = append(out, clEntry{rp, k, v})
		}
		for _, k := range rp.tombstones { // before the entries that may rewrite them
			out = append(out, clEntry{rp, k, nil})
		}
		if rp.kp != nil {
			for _, n := range rp.kp.Dirty() {
				emit(append([]byte{changelogKeyPrefix}, n...), rp.kp.Encode(n))
			}
			continue
		}
		for _, k := range rp.dropOwn {
			emit(k, nil)
		}
		rp.win.Sweep()
		names, meta := rp.win.Dirty()
		for _, k := range names {
			emit(append([]byte{changelogKeyPrefix}, k...), rp.win.EncodeKey(k))
		}
		for _, k := range rp.win.DirtyBuckets() {
			emit(append([]byte{changelogBucketPrefix}, k...), rp.win.EncodeBucket(k))
		}
		if meta {
			emit([]byte(changelogMeta), rp.win.EncodeMeta())
		}
		if rp.win.ExtraDirty() {
			emit([]byte(changelogExtra), rp.win.EncodeExtra())
		}
		if !rp.hashOK {
			out = append(out, clEntry{rp, []byte(changelogHash), []byte(stateHashPrefix + rp.t.hash)}) // 66 bytes, read whole (loadRulePart, restorePartition)
		}
		if kt := rp.t.keeper; kt != nil && rp.keptBy != kt.ns {
			out = append(out, clEntry{rp, []byte(changelogKept), []byte(kt.ns)})
		}
		acct, err := jsonMarshal(rp.batchAcct)
		if err != nil {
			return out, err
		}
		out = append(out, clEntry{rp, []byte(changelogAcct), acct}) // a few hundred bytes, read whole (internal/reconcile)
	}
	return out, nil
}

// keysPastEnd is keysPast up to the end of t's changelog partition p.
func keysPastEnd(ctx context.Context, t *task, p int32, target int64) ([][]byte, error) {
	end, err := t.restore.end(ctx, p)
	if err != nil {
		return nil, err
	}
	return keysPast(ctx, t.restore, p, target, end)
}

// rewriteFlushed marks the keys of an aborted batch's changelog records,
// which at_least_once flushed, for a rewrite at the next commit
// (rulePart.rewrite).
func rewriteFlushed(es []clEntry) {
	for _, e := range es {
		e.rp.rewrite = append(e.rp.rewrite, e.name)
	}
}

// keysPast returns the keys of the changelog records of partition p in
// [target, end): records past the committed position, which at_least_once
// flushed for batches whose offsets were never committed (rulePart.rewrite).
func keysPast(ctx context.Context, r state.ChangelogReader, p int32, target, end int64) ([][]byte, error) {
	if end <= target {
		return nil, nil
	}
	seen := map[string]bool{}
	var keys [][]byte
	err := r.Read(ctx, p, target, end, func(rec state.ChangelogRecord) error {
		if !seen[string(rec.Key)] {
			seen[string(rec.Key)] = true
			keys = append(keys, bytes.Clone(rec.Key))
		}
		return nil
	})
	return keys, err
}

// commitChunks records what the committed batch did to the chunked entries.
func (rp *rulePart) commitChunks() {
	for name, n := range rp.batchChunks {
		if n == 0 {
			delete(rp.chunks, name)
		} else {
			rp.chunks[name] = n
		}
	}
	rp.batchChunks, rp.chunked = nil, 0
}
