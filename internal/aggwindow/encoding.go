package aggwindow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vibeline/processor/internal/codec"
)

// Binary encoding of a partition's window state, format version 1.
//
// A store keeps these bytes opaquely: one value per key (EncodeKey) and one
// per partition (EncodeMeta). The first byte of each is the format version;
// a reader rejects versions it does not know with an error wrapping
// ErrUnknownVersion (the state is then rebuilt by replay, never guessed at).
//
// Primitive types (as in package window; those of package codec):
//
//	u8       one byte
//	u64be    8 bytes, big-endian
//	u64le    8 bytes, little-endian
//	uvarint  unsigned LEB128 (encoding/binary.AppendUvarint), minimal length
//	varint   zig-zag signed LEB128 (encoding/binary.AppendVarint), minimal length
//	string   uvarint byte length, then the bytes
//
// Key value (EncodeKey), the live windows of one key; the key itself is not
// repeated (it is the storage key):
//
//	u8       version = 1
//	u8       kind               1 tumbling, 2 hopping, 3 session (must match the config)
//	u8       fn                 1 count, 2 sum, 3 avg, 4 min, 5 max (must match the config)
//	uvarint  N >= 1, number of live windows
//	N x window, strictly increasing by start:
//	  varint   start
//	  varint   last             sessions only: ts of the latest event, >= start
//	  uvarint  count            events in the window, >= 1
//	  sum, avg only:
//	    uvarint  P              1..64 partials
//	    P x u64le               IEEE-754 bits of the scaled partials (finite)
//	  min, max only:
//	    u64le    extreme        IEEE-754 bits of the min or max value (finite)
//	  uvarint  V                = min(count, EvidenceLimit)
//	  V x event, strictly increasing in the fn's evidence order:
//	    varint   ts
//	    string   event_id
//	    string   sensor_id
//	    u64le    value          IEEE-754 bits (finite)
//	    varint   partition      int32 range
//	    varint   offset
//	  u8       fired            0 or 1
//	  fired only:
//	    string   alert_id       non-empty
//	    uvarint  revision       the last emitted revision
//
// Nothing may follow. On load: fixed windows start on the hop grid
// (start mod advance = 0, start + size > MinTS, start <= MaxTS); sessions
// satisfy MinTS <= start <= last <= MaxTS and are at least gap apart
// (next.start >= previous.last + gap); every evidence event lies in its
// window; with min and max the first evidence value is the extreme; with
// count, sum and avg a session's first evidence event is at its start.
//
// Partition meta value (EncodeMeta):
//
//	u8       version = 1
//	u64be    watermark          two's complement int64; NoWatermark = math.MinInt64
//
// The due queue is not stored: LoadKey rebuilds it.
const formatVersion = 1

// maxPartials bounds the partials of a sum (Shewchuk's algorithm needs at
// most about 40 for float64).
const maxPartials = 64

// ErrUnknownVersion is wrapped by LoadKey and LoadMeta when the first byte
// is not a format version this package reads.
var ErrUnknownVersion = errors.New("unknown state format version")

// ErrCorrupt is wrapped by LoadKey and LoadMeta for bytes that are not a
// valid encoding of a known version under the partition's config.
var ErrCorrupt = errors.New("corrupt state")

// EncodeKey returns the encoding of key's state, or nil when the key has no
// live window (never had one, or all closed).
func (p *Partition) EncodeKey(key string) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	size := 4
	for _, wn := range ks.wins {
		size += 40 + 8*len(wn.agg.partials) + len(wn.alertID)
		for i := range wn.evidence {
			size += 32 + len(wn.evidence[i].EventID) + len(wn.evidence[i].SensorID)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, formatVersion, byte(p.cfg.Kind), byte(p.cfg.Fn))
	b = codec.AppendUvarint(b, uint64(len(ks.wins)))
	for _, wn := range ks.wins {
		b = codec.AppendVarint(b, wn.start)
		if p.cfg.Kind == Session {
			b = codec.AppendVarint(b, wn.last)
		}
		b = codec.AppendUvarint(b, uint64(wn.agg.count))
		switch p.cfg.Fn {
		case Sum, Avg:
			b = codec.AppendUvarint(b, uint64(len(wn.agg.partials)))
			for _, x := range wn.agg.partials {
				b = codec.AppendFloat64(b, x)
			}
		case Min, Max:
			b = codec.AppendFloat64(b, wn.agg.ext)
		}
		b = codec.AppendUvarint(b, uint64(len(wn.evidence)))
		for i := range wn.evidence {
			b = appendEvent(b, &wn.evidence[i])
		}
		if wn.fired {
			b = append(b, 1)
			b = codec.AppendString(b, wn.alertID)
			b = codec.AppendUvarint(b, uint64(wn.rev))
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// EncodeMeta returns the encoding of the partition meta (the watermark).
func (p *Partition) EncodeMeta() []byte {
	b := make([]byte, 9)
	b[0] = formatVersion
	binary.BigEndian.PutUint64(b[1:], uint64(p.wm))
	return b
}

// LoadMeta restores the partition meta from EncodeMeta's bytes. It does not
// mark anything dirty and closes nothing (the next Process or Advance does).
func (p *Partition) LoadMeta(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("aggwindow: load meta: %w: empty", ErrCorrupt)
	}
	if data[0] != formatVersion {
		return fmt.Errorf("aggwindow: load meta: %w %d", ErrUnknownVersion, data[0])
	}
	if len(data) != 9 {
		return fmt.Errorf("aggwindow: load meta: %w: %d bytes, want 9", ErrCorrupt, len(data))
	}
	p.wm = int64(binary.BigEndian.Uint64(data[1:]))
	return nil
}

// LoadKey restores key's state from EncodeKey's bytes, replacing any state
// the key had, and queues its windows for closing. It does not mark anything
// dirty. On error the partition is unchanged.
func (p *Partition) LoadKey(key string, data []byte) error {
	ks, err := p.decodeKey(key, data)
	if err != nil {
		return fmt.Errorf("aggwindow: load key %q: %w", key, err)
	}
	if old := p.keys[key]; old != nil {
		for _, wn := range old.wins {
			wn.dead = true
			p.nWindows--
			if wn.fired {
				p.nFired--
			}
		}
		if old.dirty {
			ks.dirty = true // still listed in dirtyKeys
		}
	}
	p.keys[key] = ks
	for _, wn := range ks.wins {
		p.nWindows++
		if wn.fired {
			p.nFired++
		}
		p.queue(wn)
	}
	return nil
}

func appendEvent(b []byte, e *Evidence) []byte {
	b = codec.AppendVarint(b, e.TS)
	b = codec.AppendString(b, e.EventID)
	b = codec.AppendString(b, e.SensorID)
	b = codec.AppendFloat64(b, e.Value)
	b = codec.AppendVarint(b, int64(e.Partition))
	return codec.AppendVarint(b, e.Offset)
}

// readFinite reads a finite f64le.
func readFinite(r *codec.Reader, what string) float64 {
	v := r.Float64(what)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.Fail("%s %v is not finite", what, v)
	}
	return v
}

func readEvent(r *codec.Reader) Evidence {
	return Evidence{
		TS:        r.Varint("ts"),
		EventID:   r.String("event_id"),
		SensorID:  r.String("sensor_id"),
		Value:     readFinite(r, "evidence value"),
		Partition: r.Int32("partition"),
		Offset:    r.Varint("offset"),
	}
}

const minEventBytes = 1 + 1 + 1 + 8 + 1 + 1

func (p *Partition) decodeKey(key string, data []byte) (*keyState, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(formatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	if k, fn := Kind(r.Byte("kind")), Fn(r.Byte("fn")); r.Err() == nil && (k != p.cfg.Kind || fn != p.cfg.Fn) {
		r.Fail("state of %s %s windows, the config has %s %s", k, fn, p.cfg.Kind, p.cfg.Fn)
	}
	ks := &keyState{key: key}
	n := r.Count("window", 4)
	if r.Err() == nil && n == 0 {
		r.Fail("no windows (a key without windows has no value)")
	}
	session := p.cfg.Kind == Session
	for i := 0; i < n && r.Err() == nil; i++ {
		wn := &win{ks: ks, start: r.Varint("start")}
		if session {
			wn.last = r.Varint("last")
		}
		c := r.Uvarint("count")
		if r.Err() == nil && (c == 0 || c > math.MaxInt32) {
			r.Fail("window %d count %d", i, c)
		}
		wn.agg.count = int(c)
		switch p.cfg.Fn {
		case Sum, Avg:
			np := r.Count("partial", 8)
			if r.Err() == nil && (np == 0 || np > maxPartials) {
				r.Fail("window %d has %d partials, want 1..%d", i, np, maxPartials)
			}
			for j := 0; j < np && r.Err() == nil; j++ {
				wn.agg.partials = append(wn.agg.partials, readFinite(&r, "partial"))
			}
		case Min, Max:
			wn.agg.ext = readFinite(&r, "extreme")
		}
		v := r.Count("evidence", minEventBytes)
		if r.Err() == nil && v != min(int(c), p.cfg.EvidenceLimit) {
			r.Fail("window %d has %d evidence events, want min(count %d, limit %d)", i, v, c, p.cfg.EvidenceLimit)
		}
		if r.Err() == nil && v > 0 {
			wn.evidence = make([]Evidence, 0, v)
			for range v {
				wn.evidence = append(wn.evidence, readEvent(&r))
			}
		}
		switch r.Byte("fired") {
		case 0:
		case 1:
			wn.fired = true
			wn.alertID = r.String("alert_id")
			rev := r.Uvarint("revision")
			if r.Err() == nil && (wn.alertID == "" || rev > math.MaxInt32) {
				r.Fail("window %d alert %q revision %d", i, wn.alertID, rev)
			}
			wn.rev = int(rev)
		default:
			r.Fail("window %d fired flag not 0 or 1", i)
		}
		if r.Err() != nil {
			break
		}
		if msg := p.checkWindow(wn, ks.wins); msg != "" {
			r.Fail("window %d: %s", i, msg)
			break
		}
		ks.wins = append(ks.wins, wn)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return ks, nil
}

// checkWindow checks what a decoded window must satisfy given the windows
// before it, and returns what is wrong or "".
func (p *Partition) checkWindow(wn *win, prev []*win) string {
	var lo, hi int64 // the range of event times the window holds
	if p.cfg.Kind == Session {
		if wn.start < MinTS || wn.last < wn.start || wn.last > MaxTS {
			return fmt.Sprintf("session [%d, %d] out of range", wn.start, wn.last)
		}
		if k := len(prev); k > 0 && wn.start < prev[k-1].last+p.cfg.GapMs {
			return "session not at least gap after the previous one"
		}
		lo, hi = wn.start, wn.last
	} else {
		if wn.start > MaxTS || wn.start+p.cfg.SizeMs <= MinTS || floorDiv(wn.start, p.adv)*p.adv != wn.start {
			return fmt.Sprintf("start %d not a window start", wn.start)
		}
		if k := len(prev); k > 0 && wn.start <= prev[k-1].start {
			return "windows not strictly increasing by start"
		}
		lo, hi = wn.start, wn.start+p.cfg.SizeMs-1
	}
	ev := wn.evidence
	for i := range ev {
		if ev[i].TS < lo || ev[i].TS > hi {
			return fmt.Sprintf("evidence %q at %d outside the window", ev[i].EventID, ev[i].TS)
		}
		if i > 0 && p.order(&ev[i-1], &ev[i]) >= 0 {
			return "evidence not strictly increasing in the evidence order"
		}
	}
	if len(ev) > 0 {
		switch p.cfg.Fn {
		case Min, Max:
			if math.Float64bits(ev[0].Value) != math.Float64bits(wn.agg.ext) {
				return "first evidence value is not the extreme"
			}
		default:
			if p.cfg.Kind == Session && ev[0].TS != wn.start {
				return "first evidence event is not at the session start"
			}
		}
	}
	return ""
}
