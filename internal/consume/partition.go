package consume

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/state"
	"github.com/vibeline/processor/internal/window"
)

// Changelog record keys. A changelog partition mirrors the state of the
// input partition with the same number.
const (
	changelogKeyPrefix = 'k' // "k" + rule key: one key's window state (window encoding)
	changelogMeta      = "m" // the partition's window meta (watermark), window encoding
	changelogAcct      = "a" // the partition's accounting record, JSON
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

// part is one owned input partition: its window state, its committed
// changelog position and its accounting. Only Run's goroutine touches it.
type part struct {
	id     int32
	win    *window.Partition
	target int64 // committed changelog position (next offset)
	acct   pipeline.Accounting

	endOffset  int64     // last stable offset at the last fetch
	lastRecord time.Time // record timestamp of the last record consumed

	// Of the open batch:
	stats     batchStats
	touched   bool
	lastCL    *kgo.Record         // last changelog record produced in this batch
	batchAcct pipeline.Accounting // acct as it will be once the batch commits
}

// loadPart builds a partition's in-memory state from the local store, which
// holds exactly its committed state.
func loadPart(st *state.Store, stage *pipeline.Stage, p int32) (*part, error) {
	win := stage.NewPartition()
	pt := &part{id: p, win: win, acct: pipeline.Accounting{Version: 1}, stats: newBatchStats()}
	target, _, err := st.Checkpoint(p)
	if err != nil {
		return nil, err
	}
	pt.target = target
	err = st.Scan(p, func(name, value []byte) error {
		switch {
		case string(name) == changelogMeta:
			return win.LoadMeta(value)
		case string(name) == changelogAcct:
			a, err := DecodeAccounting(value)
			pt.acct = a
			return err
		case len(name) > 0 && name[0] == changelogKeyPrefix:
			return win.LoadKey(string(name[1:]), value)
		default:
			return fmt.Errorf("unknown state entry %q", name)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("consume: load partition %d: %w", p, err)
	}
	win.ClearDirty()
	pt.batchAcct = pt.acct
	return pt, nil
}

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
