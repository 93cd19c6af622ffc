package aggwindow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/vibeline/processor/internal/codec"
)

// Binary encoding of a partition's window state.
//
// A store keeps these bytes opaquely, as values of entries it names:
//
//   - session windows: one value per key (EncodeKey, format version 1),
//     the key's whole state;
//   - tumbling and hopping windows: one value per non-empty pane of a key
//     (EncodePane, format version 2; panes.go), and one value per key
//     listing its fired windows (EncodeKey, format version 2), absent when
//     no live window of the key fired. A commit then rewrites the panes
//     that changed (normally the newest of each key changed) and the key
//     value only when a window fired, was revised or closed fired;
//   - one value per partition (EncodeMeta, format version 1).
//
// The first byte of each is the format version; a reader rejects versions
// it does not know with an error wrapping ErrUnknownVersion (the state is
// then rebuilt by replay, never guessed at). Version 1 also encoded tumbling
// and hopping windows, as session keys are below (every window with its own
// evidence); such a value is refused under a tumbling or hopping config.
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
// Session key value (EncodeKey, sessions), the live sessions of one key; the
// key itself is not repeated (it is the storage key):
//
//	u8       version = 1
//	u8       kind               3 session (must match the config)
//	u8       fn                 1 count, 2 sum, 3 avg, 4 min, 5 max (must match the config)
//	uvarint  N >= 1, number of live sessions
//	N x session, strictly increasing by start:
//	  varint   start
//	  varint   last             ts of the latest event, >= start
//	  body
//	  u8       fired            0 or 1
//	  fired only:
//	    string   alert_id       non-empty
//	    uvarint  revision       the last emitted revision
//
// where body, the aggregate and evidence of a session or pane, is
//
//	uvarint  count              events in the session or pane, >= 1
//	sum, avg only:
//	  uvarint  P                1..64 partials
//	  P x u64le                 IEEE-754 bits of the scaled partials (finite)
//	min, max only:
//	  u64le    extreme          IEEE-754 bits of the min or max value (finite)
//	uvarint  V                  = min(count, EvidenceLimit)
//	V x event, strictly increasing in the fn's evidence order:
//	  varint   ts
//	  string   event_id
//	  string   sensor_id
//	  u64le    value            IEEE-754 bits (finite)
//	  varint   partition        int32 range
//	  varint   offset
//
// Nothing may follow. On load sessions satisfy MinTS <= start <= last <=
// MaxTS and are at least gap apart (next.start >= previous.last + gap);
// every evidence event lies in its session; with min and max the first
// evidence value is the extreme; with count, sum and avg the first evidence
// event is at the session start.
//
// Fixed-window key value (EncodeKey, tumbling and hopping), the fired live
// windows of one key (the key is the storage key; their aggregates and
// evidence come from the panes):
//
//	u8       version = 2
//	u8       kind               1 tumbling, 2 hopping (must match the config)
//	u8       fn                 1 count, 2 sum, 3 avg, 4 min, 5 max (must match the config)
//	uvarint  N >= 1, number of fired live windows
//	N x window, strictly increasing by start:
//	  varint   start            on the hop grid: start mod advance = 0
//	  string   alert_id         non-empty
//	  uvarint  revision         the last emitted revision
//
// Pane value (EncodePane), one non-empty pane of a key; the key and the
// pane start are the storage key (PaneRef):
//
//	u8       version = 2
//	u8       kind               1 tumbling, 2 hopping (must match the config)
//	u8       fn                 (must match the config)
//	body                        of the pane's events
//
// Nothing may follow. On load window and pane starts are aligned (start mod
// advance = 0, start mod P = 0) and can hold an event (start <= MaxTS, end >
// MinTS); every evidence event of a pane lies in it and in [MinTS, MaxTS];
// with min and max the first evidence value is the extreme.
//
// Partition meta value (EncodeMeta):
//
//	u8       version = 1
//	u64be    watermark          two's complement int64; NoWatermark = math.MinInt64
//
// The due queue is not stored: LoadKey and LoadPane rebuild it, and the
// windows of fixed-window keys (panes.go).
const (
	formatVersion      = 1 // sessions and meta
	fixedFormatVersion = 2 // tumbling and hopping keys and panes
)

// maxPartials bounds the partials of a sum (Shewchuk's algorithm needs at
// most about 40 for float64).
const maxPartials = 64

// ErrUnknownVersion is wrapped by LoadKey, LoadPane and LoadMeta when the
// first byte is not a format version this package reads for the config.
var ErrUnknownVersion = errors.New("unknown state format version")

// ErrCorrupt is wrapped by LoadKey, LoadPane and LoadMeta for bytes that are
// not a valid encoding of a known version under the partition's config.
var ErrCorrupt = errors.New("corrupt state")

// EncodeKey returns the encoding of key's key entry, or nil when it has
// none: the key has no live window (never had one, or all closed), or,
// with tumbling and hopping windows, none of its live windows fired.
func (p *Partition) EncodeKey(key string) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	if p.cfg.Kind != Session {
		return p.encodeFixedKey(ks)
	}
	size := 3 + uvarintLen(uint64(len(ks.wins)))
	for _, wn := range ks.wins {
		size += varintLen(wn.start) + varintLen(wn.last) + p.bodySize(&wn.agg, wn.evidence) + 1
		if wn.fired {
			size += stringLen(wn.alertID) + uvarintLen(uint64(wn.rev))
		}
	}
	b := make([]byte, 0, size) // exactly: the value is kept (a changelog record), not copied
	b = append(b, formatVersion, byte(p.cfg.Kind), byte(p.cfg.Fn))
	b = codec.AppendUvarint(b, uint64(len(ks.wins)))
	for _, wn := range ks.wins {
		b = codec.AppendVarint(b, wn.start)
		b = codec.AppendVarint(b, wn.last)
		b = p.appendBody(b, &wn.agg, wn.evidence)
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

// encodeFixedKey encodes the fired windows of a fixed-window key, nil when
// there are none.
func (p *Partition) encodeFixedKey(ks *keyState) []byte {
	n, size := 0, 3
	for _, wn := range ks.wins {
		if wn.fired {
			n++
			size += varintLen(wn.start) + stringLen(wn.alertID) + uvarintLen(uint64(wn.rev))
		}
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, size+uvarintLen(uint64(n))) // exactly, as EncodeKey
	b = append(b, fixedFormatVersion, byte(p.cfg.Kind), byte(p.cfg.Fn))
	b = codec.AppendUvarint(b, uint64(n))
	for _, wn := range ks.wins {
		if wn.fired {
			b = codec.AppendVarint(b, wn.start)
			b = codec.AppendString(b, wn.alertID)
			b = codec.AppendUvarint(b, uint64(wn.rev))
		}
	}
	return b
}

// EncodePane returns the encoding of one pane of a tumbling or hopping
// window key, or nil when the key has no such pane (never had, or dropped
// when the last window containing it closed).
func (p *Partition) EncodePane(key string, start int64) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(ks.panes, start, cmpPaneStart)
	if !ok {
		return nil
	}
	pn := ks.panes[i]
	b := make([]byte, 0, 3+p.bodySize(&pn.agg, pn.evidence)) // exactly, as EncodeKey
	b = append(b, fixedFormatVersion, byte(p.cfg.Kind), byte(p.cfg.Fn))
	return p.appendBody(b, &pn.agg, pn.evidence)
}

// bodySize is the length of appendBody's encoding.
func (p *Partition) bodySize(a *aggState, ev []Evidence) int {
	n := uvarintLen(uint64(a.count)) + uvarintLen(uint64(len(ev)))
	switch p.cfg.Fn {
	case Sum, Avg:
		n += uvarintLen(uint64(len(a.partials))) + 8*len(a.partials)
	case Min, Max:
		n += 8
	}
	for i := range ev {
		e := &ev[i]
		n += varintLen(e.TS) + stringLen(e.EventID) + stringLen(e.SensorID) + 8 + varintLen(int64(e.Partition)) + varintLen(e.Offset)
	}
	return n
}

// uvarintLen is the length of codec.AppendUvarint's encoding of x.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// varintLen is the length of codec.AppendVarint's encoding of x (zig-zag).
func varintLen(x int64) int { return uvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

// stringLen is the length of codec.AppendString's encoding of s.
func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// appendBody appends a session's or pane's count, aggregate and evidence.
func (p *Partition) appendBody(b []byte, a *aggState, ev []Evidence) []byte {
	b = codec.AppendUvarint(b, uint64(a.count))
	switch p.cfg.Fn {
	case Sum, Avg:
		b = codec.AppendUvarint(b, uint64(len(a.partials)))
		for _, x := range a.partials {
			b = codec.AppendFloat64(b, x)
		}
	case Min, Max:
		b = codec.AppendFloat64(b, a.ext)
	}
	b = codec.AppendUvarint(b, uint64(len(ev)))
	for i := range ev {
		b = appendEvent(b, &ev[i])
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

// LoadMeta restores the partition meta from EncodeMeta's bytes. It emits
// nothing and marks nothing dirty. Fired windows the watermark closes are
// closed (and reported) by the next Process or Advance; the unfired
// tumbling and hopping windows it closes are dropped now: restored from
// panes they share with later windows, they had closed before those panes
// were persisted.
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
	p.pruneClosed()
	return nil
}

// LoadKey restores key's key entry from EncodeKey's bytes and queues the
// windows it creates for closing. It does not mark anything dirty. On
// error the partition is unchanged.
//
// Sessions: the entry is the key's whole state, which it replaces.
// Tumbling and hopping windows: it replaces the key's fired state (which
// windows fired, their alert ids and revisions); the aggregates come from
// the key's panes (LoadPane), which may be loaded before or after it.
func (p *Partition) LoadKey(key string, data []byte) error {
	if p.cfg.Kind != Session {
		fs, err := p.decodeFixedKey(data)
		if err != nil {
			return fmt.Errorf("aggwindow: load key %q: %w", key, err)
		}
		p.installFired(key, fs)
		return nil
	}
	ks, err := p.decodeKey(key, data)
	if err != nil {
		return fmt.Errorf("aggwindow: load key %q: %w", key, err)
	}
	if old := p.keys[key]; old != nil {
		old.dropped = true
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

// LoadPane restores one pane of a tumbling or hopping window key from
// EncodePane's bytes, replacing the pane of that start if the key has one,
// and creates or completes the windows that contain it and have not closed
// at the watermark loaded so far (LoadMeta drops those a later watermark
// closes). A pane none of whose windows is live is ignored. It does not
// mark anything dirty. On error the partition is unchanged.
func (p *Partition) LoadPane(key string, start int64, data []byte) error {
	if p.cfg.Kind == Session {
		return fmt.Errorf("aggwindow: load pane %q at %d: %w: session windows have no panes", key, start, ErrCorrupt)
	}
	pn, err := p.decodePane(start, data)
	if err != nil {
		return fmt.Errorf("aggwindow: load pane %q at %d: %w", key, start, err)
	}
	p.installPane(key, pn)
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

// readKindFn reads the kind and fn bytes, which must be the config's.
func (p *Partition) readKindFn(r *codec.Reader) {
	if k, fn := Kind(r.Byte("kind")), Fn(r.Byte("fn")); r.Err() == nil && (k != p.cfg.Kind || fn != p.cfg.Fn) {
		r.Fail("state of %s %s windows, the config has %s %s", k, fn, p.cfg.Kind, p.cfg.Fn)
	}
}

// readBody reads a session's or pane's count, aggregate and evidence (see
// the format); what names it in messages.
func (p *Partition) readBody(r *codec.Reader, what string) (aggState, []Evidence) {
	var a aggState
	c := r.Uvarint("count")
	if r.Err() == nil && (c == 0 || c > math.MaxInt32) {
		r.Fail("%s count %d", what, c)
	}
	a.count = int(c)
	switch p.cfg.Fn {
	case Sum, Avg:
		np := r.Count("partial", 8)
		if r.Err() == nil && (np == 0 || np > maxPartials) {
			r.Fail("%s has %d partials, want 1..%d", what, np, maxPartials)
		}
		for j := 0; j < np && r.Err() == nil; j++ {
			a.partials = append(a.partials, readFinite(r, "partial"))
		}
	case Min, Max:
		a.ext = readFinite(r, "extreme")
	}
	v := r.Count("evidence", minEventBytes)
	if r.Err() == nil && v != min(int(c), p.cfg.EvidenceLimit) {
		r.Fail("%s has %d evidence events, want min(count %d, limit %d)", what, v, c, p.cfg.EvidenceLimit)
	}
	var ev []Evidence
	if r.Err() == nil && v > 0 {
		ev = make([]Evidence, 0, v)
		for range v {
			ev = append(ev, readEvent(r))
		}
	}
	return a, ev
}

// checkEvidence checks that the evidence ev of an aggregate a lies in
// [lo, hi], is strictly increasing in the evidence order and, with min and
// max, starts with the extreme; it returns what is wrong or "".
func (p *Partition) checkEvidence(ev []Evidence, a *aggState, lo, hi int64) string {
	for i := range ev {
		if ev[i].TS < lo || ev[i].TS > hi {
			return fmt.Sprintf("evidence %q at %d outside [%d, %d]", ev[i].EventID, ev[i].TS, lo, hi)
		}
		if i > 0 && p.order.cmp(&ev[i-1], &ev[i]) >= 0 {
			return "evidence not strictly increasing in the evidence order"
		}
	}
	if len(ev) > 0 && (p.cfg.Fn == Min || p.cfg.Fn == Max) && math.Float64bits(ev[0].Value) != math.Float64bits(a.ext) {
		return "first evidence value is not the extreme"
	}
	return ""
}

// decodeKey decodes a session key value.
func (p *Partition) decodeKey(key string, data []byte) (*keyState, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(formatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	p.readKindFn(&r)
	ks := &keyState{key: key}
	n := r.Count("window", 4)
	if r.Err() == nil && n == 0 {
		r.Fail("no windows (a key without windows has no value)")
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		wn := &win{ks: ks, start: r.Varint("start"), last: r.Varint("last")}
		wn.agg, wn.evidence = p.readBody(&r, fmt.Sprintf("session %d", i))
		switch r.Byte("fired") {
		case 0:
		case 1:
			wn.fired = true
			wn.alertID = r.String("alert_id")
			rev := r.Uvarint("revision")
			if r.Err() == nil && (wn.alertID == "" || rev > math.MaxInt32) {
				r.Fail("session %d alert %q revision %d", i, wn.alertID, rev)
			}
			wn.rev = int(rev)
		default:
			r.Fail("session %d fired flag not 0 or 1", i)
		}
		if r.Err() != nil {
			break
		}
		if msg := p.checkSession(wn, ks.wins); msg != "" {
			r.Fail("session %d: %s", i, msg)
			break
		}
		ks.wins = append(ks.wins, wn)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return ks, nil
}

// checkSession checks what a decoded session must satisfy given the
// sessions before it, and returns what is wrong or "".
func (p *Partition) checkSession(wn *win, prev []*win) string {
	if wn.start < MinTS || wn.last < wn.start || wn.last > MaxTS {
		return fmt.Sprintf("session [%d, %d] out of range", wn.start, wn.last)
	}
	if k := len(prev); k > 0 && wn.start < prev[k-1].last+p.cfg.GapMs {
		return "session not at least gap after the previous one"
	}
	if msg := p.checkEvidence(wn.evidence, &wn.agg, wn.start, wn.last); msg != "" {
		return msg
	}
	if ev := wn.evidence; len(ev) > 0 && p.cfg.Fn != Min && p.cfg.Fn != Max && ev[0].TS != wn.start {
		return "first evidence event is not at the session start"
	}
	return ""
}

// decodeFixedKey decodes a fixed-window key value: its fired windows.
func (p *Partition) decodeFixedKey(data []byte) ([]firedMeta, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(fixedFormatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	p.readKindFn(&r)
	n := r.Count("fired window", 4)
	if r.Err() == nil && n == 0 {
		r.Fail("no fired windows (a key without one has no value)")
	}
	fs := make([]firedMeta, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		f := firedMeta{start: r.Varint("start"), alertID: r.String("alert_id")}
		rev := r.Uvarint("revision")
		switch {
		case r.Err() != nil:
		case !p.windowStartOK(f.start):
			r.Fail("fired window %d: start %d not a window start", i, f.start)
		case i > 0 && f.start <= fs[i-1].start:
			r.Fail("fired window %d: not strictly increasing by start", i)
		case f.alertID == "" || rev > math.MaxInt32:
			r.Fail("fired window %d: alert %q revision %d", i, f.alertID, rev)
		}
		f.rev = int(rev)
		fs = append(fs, f)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return fs, nil
}

// decodePane decodes a pane value of the pane starting at start.
func (p *Partition) decodePane(start int64, data []byte) (*pane, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(fixedFormatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	if !p.paneInRange(start) {
		r.Fail("start %d not a pane start (pane length %d)", start, p.paneMs)
	}
	p.readKindFn(&r)
	pn := &pane{start: start}
	pn.agg, pn.evidence = p.readBody(&r, "pane")
	if r.Err() == nil {
		lo, hi := max(start, MinTS), min(start+p.paneMs-1, MaxTS)
		if msg := p.checkEvidence(pn.evidence, &pn.agg, lo, hi); msg != "" {
			r.Fail("pane: %s", msg)
		}
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return pn, nil
}
