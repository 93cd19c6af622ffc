package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// FormatVersion is the on-disk format of the key layout below. A store with
// another version is wiped and restored from the changelog.
const FormatVersion = 1

// Key layout (all integers big-endian):
//
//	"v"                                  -> FormatVersion as 1 byte
//	"o"                                  -> the owner (Claim): the changelog topic the
//	                                        store mirrors; absent in stores written
//	                                        before owners were recorded
//	"p" | partition u32 | "c"            -> changelog checkpoint: next changelog offset, i64
//	"p" | partition u32 | "s" | name     -> one changelog entry: name is the changelog
//	                                        record key (e.g. "k<machine>", "m", "a"), value
//	                                        its bytes, exactly as in the changelog
//
// The store mirrors the committed changelog: an entry exists exactly when the
// changelog's latest committed record for that key (in that partition) is
// not a tombstone.
//
// The store has no write-ahead log (Pebble's DisableWAL, as Kafka Streams
// runs RocksDB under its stores): the changelog is the durable log, and the
// store only saves a restart from reading all of it. A commit goes to the
// memtable alone; a crash loses the batches since the last memtable flush,
// which leaves an older state and checkpoint of one consistent prefix of
// batches (a batch never spans two memtables, and memtables flush in
// order), and Restore brings it forward from the changelog, as after a
// crash that lost a WAL tail. Close flushes, so a clean stop keeps
// everything; so do the rare writes that must survive a crash (format
// version, owner, drops: durable).
var versionKey = []byte("v")

var ownerKey = []byte("o")

// memTableSize is Pebble's memtable size. Every commit rewrites the state
// entries its batch changed, so most entries are overwritten within
// seconds: with Pebble's default (4 MiB) a rule that takes every event
// flushed and compacted several times a second (7% of the processor's CPU
// with 10 rules, docs/BENCHMARKS.md); entries overwritten within one
// memtable never reach a table. Pebble grows a store's memtables up to this
// size as they fill, so a quiet rule does not hold it.
const memTableSize = 16 << 20

func partitionPrefix(p int32) []byte {
	k := make([]byte, 5, 32)
	k[0] = 'p'
	binary.BigEndian.PutUint32(k[1:], uint32(p))
	return k
}

func checkpointKey(p int32) []byte { return append(partitionPrefix(p), 'c') }

func entryKey(p int32, name []byte) []byte {
	return append(append(partitionPrefix(p), 's'), name...)
}

func entryPrefix(p int32) []byte { return append(partitionPrefix(p), 's') }

// prefixEnd returns the smallest key greater than every key with prefix.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// Store is the local Pebble store of one rule namespace.
type Store struct {
	// closeMu orders Close against Stats, which metrics scrapes call from
	// other goroutines; every other method is used by one goroutine at a time.
	closeMu sync.RWMutex
	db      *pebble.DB
	dir     string
	logger  *slog.Logger
	// Wiped reports whether Open found an unusable store and started empty.
	Wiped bool
}

// Open opens (or creates) the store in dir. A store that cannot be read
// (corrupt) or has another format version is removed and created empty: its
// content comes back from the changelog. A store that is not the store's
// fault is never removed: dir not a directory or not accessible, or the
// store locked by another process using it (two replicas given the same
// state_dir); Open then fails with the reason.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	s := &Store{dir: dir, logger: logger}
	db, err := s.open()
	var keep keepError
	if errors.As(err, &keep) {
		return nil, fmt.Errorf("state: open store %s: %w", dir, keep.err)
	}
	if err != nil {
		logger.Warn("state: local store unusable, wiping it for a full restore from the changelog", "dir", dir, "err", err)
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			return nil, fmt.Errorf("state: remove unusable store %s: %w", dir, rmErr)
		}
		s.Wiped = true
		if db, err = s.open(); err != nil {
			return nil, fmt.Errorf("state: open fresh store %s: %w", dir, err)
		}
	}
	s.db = db
	return s, nil
}

// keepError is an open error that is not the store's content: Open must not
// wipe the directory for it.
type keepError struct{ err error }

func (e keepError) Error() string { return e.err.Error() }
func (e keepError) Unwrap() error { return e.err }

func (s *Store) open() (*pebble.DB, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, keepError{fmt.Errorf("create dir: %w", err)}
	}
	db, err := pebble.Open(s.dir, &pebble.Options{Logger: quietLogger{s.logger}, MemTableSize: memTableSize, DisableWAL: true})
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || strings.Contains(err.Error(), "lock held") {
			return nil, keepError{fmt.Errorf("locked by another process (two replicas with the same state_dir?): %w", err)}
		}
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return nil, keepError{err}
		}
		return nil, err
	}
	v, closer, err := db.Get(versionKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := durable(db, func() error { return db.Set(versionKey, []byte{FormatVersion}, pebble.NoSync) }); err != nil {
			db.Close()
			return nil, fmt.Errorf("write format version: %w", err)
		}
		return db, nil
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("read format version: %w", err)
	}
	ok := len(v) == 1 && v[0] == FormatVersion
	got := bytes.Clone(v)
	closer.Close()
	if !ok {
		db.Close()
		return nil, fmt.Errorf("format version %v, want %d", got, FormatVersion)
	}
	return db, nil
}

// Close closes the store. It is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.db == nil {
		return nil
	}
	// Without a WAL the memtables hold what the last commits wrote: flush
	// them, so that a clean stop needs no restore. A failed flush only costs
	// the next start a longer restore.
	ferr := s.db.Flush()
	err := s.db.Close()
	s.db = nil
	if ferr != nil && err == nil {
		err = fmt.Errorf("flush: %w", ferr)
	}
	if err != nil {
		return fmt.Errorf("state: close: %w", err)
	}
	return nil
}

// Checkpoint returns the next changelog offset reflected in partition p's
// local state, and whether the partition has a checkpoint at all.
func (s *Store) Checkpoint(p int32) (int64, bool, error) {
	v, closer, err := s.db.Get(checkpointKey(p))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("state: partition %d: read checkpoint: %w", p, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("state: partition %d: checkpoint of %d bytes, want 8", p, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// Scan calls fn for every entry of partition p in key order. The slices are
// only valid during the call.
func (s *Store) Scan(p int32, fn func(name, value []byte) error) error {
	prefix := entryPrefix(p)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: partition %d: iterate: %w", p, err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("state: partition %d: read entry: %w", p, err)
		}
		if err := fn(it.Key()[len(prefix):], v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("state: partition %d: iterate: %w", p, err)
	}
	return nil
}

// Get returns a copy of one entry of partition p, or nil when absent.
func (s *Store) Get(p int32, name []byte) ([]byte, error) {
	v, closer, err := s.db.Get(entryKey(p, name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: partition %d: get %q: %w", p, name, err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// Claim records owner (the changelog topic the store mirrors) in the
// store. When the store was claimed before by another owner, for example a
// processor of another group_id given the same state_dir, its partitions'
// state and checkpoints are dropped first (the caller restores them from
// its own changelog) and Claim reports true: a checkpoint of another
// changelog could equal a position of this one by chance and be trusted.
// A store without an owner (written before owners were recorded, or new)
// is claimed as it is.
func (s *Store) Claim(owner string) (dropped bool, err error) {
	v, closer, err := s.db.Get(ownerKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("state: read owner: %w", err)
	default:
		same := string(v) == owner
		prev := string(v)
		closer.Close()
		if same {
			return false, nil
		}
		s.logger.Warn("state: the local store mirrors another changelog; dropping it for a full restore from this one",
			"dir", s.dir, "store_changelog", prev, "changelog", owner)
		if err := durable(s.db, func() error { return s.db.DeleteRange([]byte("p"), []byte("q"), pebble.NoSync) }); err != nil {
			return false, fmt.Errorf("state: drop the state of %s: %w", prev, err)
		}
		dropped = true
	}
	if err := durable(s.db, func() error { return s.db.Set(ownerKey, []byte(owner), pebble.NoSync) }); err != nil {
		return dropped, fmt.Errorf("state: write owner: %w", err)
	}
	return dropped, nil
}

// Drop deletes all of partition p's state and its checkpoint.
func (s *Store) Drop(p int32) error {
	prefix := partitionPrefix(p)
	if err := durable(s.db, func() error { return s.db.DeleteRange(prefix, prefixEnd(prefix), pebble.NoSync) }); err != nil {
		return fmt.Errorf("state: partition %d: drop: %w", p, err)
	}
	return nil
}

// durable runs write, then flushes db's memtables to a table (Pebble syncs
// the table and its manifest), so that what write did survives a crash:
// there is no WAL to sync (the key layout comment).
func durable(db *pebble.DB, write func() error) error {
	if err := write(); err != nil {
		return err
	}
	if err := db.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// Stats describes the store for metrics.
type Stats struct {
	DiskBytes uint64
}

// Stats returns the store's size.
func (s *Store) Stats() Stats {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.db == nil {
		return Stats{}
	}
	return Stats{DiskBytes: s.db.Metrics().DiskSpaceUsage()}
}

// Batch stages changes of several partitions; nothing is visible or durable
// until Commit, which is atomic.
type Batch struct {
	b   *pebble.Batch
	key []byte // Put's scratch key (Pebble copies it)
}

// NewBatch starts a batch.
func (s *Store) NewBatch() *Batch { return &Batch{b: s.db.NewBatch()} }

// NewBatchSize starts a batch whose buffer holds entries of about size
// bytes (the sum of their BatchSize) and a checkpoint before it grows.
func (s *Store) NewBatchSize(size int) *Batch {
	return &Batch{b: s.db.NewBatchWithSize(size + 64)}
}

// BatchSize is what Put of an entry with a name and a value of these
// lengths adds to a batch's buffer, about: NewBatchSize's unit.
func BatchSize(name, value int) int { return name + value + 16 }

// Put stages one changelog entry for partition p: value nil deletes it (a
// tombstone).
func (b *Batch) Put(p int32, name, value []byte) error {
	b.key = binary.BigEndian.AppendUint32(append(b.key[:0], 'p'), uint32(p)) // entryKey
	b.key = append(append(b.key, 's'), name...)
	if value == nil {
		return b.b.Delete(b.key, nil)
	}
	return b.b.Set(b.key, value, nil)
}

// SetCheckpoint stages partition p's changelog position.
func (b *Batch) SetCheckpoint(p int32, next int64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(next))
	return b.b.Set(checkpointKey(p), v[:], nil)
}

// Empty reports whether nothing was staged.
func (b *Batch) Empty() bool { return b.b.Count() == 0 }

// Commit applies the batch atomically. It is not durable: a crash may lose
// the batches since the last memtable flush (there is no WAL), which
// leaves an older but consistent state and checkpoint that restore brings
// forward from the changelog.
func (b *Batch) Commit() error {
	if err := b.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: commit batch: %w", err)
	}
	return b.b.Close()
}

// Discard throws the staged changes away.
func (b *Batch) Discard() { b.b.Close() }

// ChangelogRecord is one record of a changelog partition.
type ChangelogRecord struct {
	Offset int64
	Key    []byte
	Value  []byte // nil: tombstone
}

// ChangelogReader reads committed records of one changelog partition in
// offset order, from offset from until the record before offset to.
type ChangelogReader interface {
	Read(ctx context.Context, partition int32, from, to int64, fn func(ChangelogRecord) error) error
}

// RestoreStats tells what a restore did.
type RestoreStats struct {
	From, To int64 // changelog offsets read [From, To)
	Records  int   // records applied
	Full     bool  // the partition was restored from scratch
}

// restoreBatchRecords bounds the memory of one restore write.
const restoreBatchRecords = 10_000

// Restore brings partition p's local state to exactly the changelog
// position target (the committed position recorded with the input offsets).
// It reads from the local checkpoint forward; without a checkpoint, or with
// one beyond target (the local store belongs to another history), it drops
// the partition and reads from the beginning.
func (s *Store) Restore(ctx context.Context, p int32, target int64, r ChangelogReader) (RestoreStats, error) {
	from, ok, err := s.Checkpoint(p)
	if err != nil {
		return RestoreStats{}, err
	}
	st := RestoreStats{From: from, To: target}
	if !ok || from > target {
		if err := s.Drop(p); err != nil {
			return st, err
		}
		from, st.From, st.Full = 0, 0, true
	}
	b := s.NewBatch()
	defer func() {
		if b != nil {
			b.Discard()
		}
	}()
	if from < target {
		began := time.Now()
		err := r.Read(ctx, p, from, target, func(rec ChangelogRecord) error {
			if err := b.Put(p, rec.Key, rec.Value); err != nil {
				return err
			}
			st.Records++
			if st.Records%restoreBatchRecords == 0 {
				el := time.Since(began).Seconds()
				s.logger.Info("state: restoring", "partition", p,
					"percent", fmt.Sprintf("%.1f", 100*float64(rec.Offset+1-from)/float64(target-from)),
					"records", st.Records, "records_per_s", int(float64(st.Records)/max(el, 1e-3)))
				if err := b.SetCheckpoint(p, rec.Offset+1); err != nil {
					return err
				}
				if err := b.Commit(); err != nil {
					return err
				}
				b = s.NewBatch()
			}
			return nil
		})
		if err != nil {
			return st, fmt.Errorf("state: restore partition %d [%d, %d): %w", p, from, target, err)
		}
	}
	if err := b.SetCheckpoint(p, target); err != nil {
		return st, err
	}
	err = b.Commit()
	b = nil
	if err != nil {
		return st, fmt.Errorf("state: restore partition %d: %w", p, err)
	}
	return st, nil
}

// quietLogger routes Pebble's informational logs to slog at debug level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(format string, args ...any) {
	q.l.Debug(fmt.Sprintf("pebble: "+format, args...))
}
func (q quietLogger) Errorf(format string, args ...any) {
	q.l.Error(fmt.Sprintf("pebble: "+format, args...))
}
func (q quietLogger) Fatalf(format string, args ...any) {
	q.l.Error(fmt.Sprintf("pebble: fatal: "+format, args...))
	os.Exit(1)
}
