package watermark

import (
	"errors"
	"fmt"

	"github.com/vibeline/processor/internal/codec"
)

// Binary encoding of a Tracker's state, format version 1.
//
// A store keeps these bytes opaquely, next to the partition state they go
// with (same write). Primitive types (those of package codec):
//
//	u8       one byte
//	uvarint  unsigned LEB128 (encoding/binary.AppendUvarint), minimal length
//	varint   zig-zag signed LEB128 (encoding/binary.AppendVarint), minimal length
//
// Layout:
//
//	u8       version = 1
//	u8       strategy          1 fixed, 2 adaptive
//	uvarint  delay_ms          Config.DelayMs
//	uvarint  percentile        round(Config.Percentile * 10^6); 0 for fixed
//	uvarint  min_ms            Config.MinMs
//	uvarint  max_ms            Config.MaxMs
//	uvarint  sample            Config.Sample
//	varint   fixed_watermark   F; NoWatermark = math.MinInt64
//	uvarint  at_risk           AtRiskTotal
//	uvarint  R                 observed delays in the sample: 0 for fixed,
//	                           else 0..sample (R < sample: still warming up)
//	R x uvarint                the observed delays, oldest first, each in
//	                           [min_ms, max_ms]
//
// Nothing may follow. The configuration fields are those the state was
// computed under: Decode refuses state of another configuration with an
// error wrapping ErrConfigMismatch (the state is then rebuilt by replay, as
// a changed rule is replayed under a new version anyway). The current delay
// is not stored: Decode recomputes it from the sample. Every state has
// exactly one encoding (minimal varints), so AppendEncode(Decode(b)) == b.
const formatVersion = 1

// Errors wrapped by Decode.
var (
	// ErrUnknownVersion: the first byte is not a format version this
	// package reads.
	ErrUnknownVersion = errors.New("unknown state format version")
	// ErrCorrupt: the bytes are not a valid encoding of a known version.
	ErrCorrupt = errors.New("corrupt state")
	// ErrConfigMismatch: valid state, of another configuration.
	ErrConfigMismatch = errors.New("state of another configuration")
)

// AppendEncode appends the encoding of the tracker's state to b. Once
// warm, an adaptive tracker's encoding takes about Sample times the varint
// size of a delay (2 to 3 bytes for delays of 0.1 s to 30 min): about 2 KB
// for Sample = 1000, 2 MB for Sample = 10^6 (see BenchmarkEncodeDecode).
func (t *Tracker) AppendEncode(b []byte) []byte {
	c := &t.cfg
	b = append(b, formatVersion, byte(c.Strategy))
	b = codec.AppendUvarint(b, uint64(c.DelayMs))
	b = codec.AppendUvarint(b, uint64(c.percentileMillionths()))
	b = codec.AppendUvarint(b, uint64(c.MinMs))
	b = codec.AppendUvarint(b, uint64(c.MaxMs))
	b = codec.AppendUvarint(b, uint64(c.Sample))
	b = codec.AppendVarint(b, t.fixedWM)
	b = codec.AppendUvarint(b, t.atRisk)
	n := t.q.len()
	b = codec.AppendUvarint(b, uint64(n))
	for i := range n {
		slot := i
		if n == c.Sample {
			slot = (t.head + i) % n
		}
		b = codec.AppendUvarint(b, uint64(t.q.valueOf(slot)))
	}
	return b
}

// Decode replaces the tracker's state with the one encoded in data by
// AppendEncode under the same configuration. On error the tracker is
// unchanged; it never panics, whatever the bytes.
func (t *Tracker) Decode(data []byte) error {
	nt, err := t.decode(data)
	if err != nil {
		return fmt.Errorf("watermark: decode: %w", err)
	}
	*t = *nt
	return nil
}

func (t *Tracker) decode(data []byte) (*Tracker, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(formatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	c := &t.cfg
	strategy := Strategy(r.Byte("strategy"))
	delay, pct, minMs, maxMs, sample := r.Uvarint("delay_ms"), r.Uvarint("percentile"), r.Uvarint("min_ms"), r.Uvarint("max_ms"), r.Uvarint("sample")
	fixedWM := r.Varint("fixed_watermark")
	atRisk := r.Uvarint("at_risk")
	if err := r.Err(); err != nil {
		return nil, err
	}
	if strategy != c.Strategy || delay != uint64(c.DelayMs) || pct != uint64(c.percentileMillionths()) ||
		minMs != uint64(c.MinMs) || maxMs != uint64(c.MaxMs) || sample != uint64(c.Sample) {
		return nil, fmt.Errorf("%w: encoded {strategy %d, delay %d, percentile %d millionths, min %d, max %d, sample %d}, tracker %+v",
			ErrConfigMismatch, strategy, delay, pct, minMs, maxMs, sample, *c)
	}
	n := r.Uvarint("sample length")
	if r.Err() == nil && (n > uint64(c.Sample) || n > uint64(r.Len())) {
		r.Fail("sample length %d exceeds the sample size %d or the remaining %d bytes", n, c.Sample, r.Len())
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	nt := &Tracker{cfg: t.cfg, rank: t.rank, delay: c.DelayMs, fixedWM: fixedWM, atRisk: atRisk}
	nt.q.k = nt.rank
	if n > 0 {
		nt.q.pos = make([]int32, 0, n)
		nt.q.h[lo] = make([]uint64, 0, min(n, uint64(nt.rank)))
		nt.q.h[hi] = make([]uint64, 0, n-min(n, uint64(nt.rank)))
	}
	for range n {
		v := r.Uvarint("observed delay")
		if err := r.Err(); err != nil {
			return nil, err
		}
		if v < uint64(c.MinMs) || v > uint64(c.MaxMs) {
			r.Fail("observed delay %d outside [min, max] = [%d, %d]", v, c.MinMs, c.MaxMs)
			return nil, r.Err()
		}
		nt.q.add(int64(v))
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	if int(n) == c.Sample && n > 0 {
		nt.delay = nt.q.value() // head = 0: slot 0 holds the oldest
	}
	return nt, nil
}
