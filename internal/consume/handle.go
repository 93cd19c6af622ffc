package consume

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
)

// chunkRecords is how many consecutive records of one partition
// handleRecords takes through the rules at once.
const chunkRecords = 256

// handleRecords runs polled records of pt, in offset order, through every
// rule that reads their topic and produces their outputs into the open
// batch: each record is decoded and validated once; a record that fails
// is dead-lettered once per distinct dead-letter topic (each letter naming
// the rules it is the letter of) and counted by every rule; a valid one is
// applied to each rule's state, and forwarded to the repartition topic of
// each repartitioned rule of the topic.
//
// It goes rule-major through chunks of chunkRecords records: the records
// of a chunk are decoded first, then the first rule takes all of them in
// order, then the second, and so on. A rule's results depend only on the
// records it takes and their order (its state, watermark, accounting and
// dedup view are its own; the views of a shared dedup store each keep the
// semantics of a set of their own, package dedup), so this decides exactly
// what a record-major loop decides, while one rule's state and code stay
// in the cache for a whole chunk (docs/BENCHMARKS.md, thirteenth round).
// The chunk's outputs are produced when its last rule is done, in the
// order a record-major loop produces them: by record, then by rule, a
// record's dead letters first and its forwards last.
func (p *Processor) handleRecords(ctx context.Context, pt *part, recs []*kgo.Record) {
	for len(recs) > 0 {
		n := min(len(recs), chunkRecords)
		p.handleChunk(ctx, pt, recs[:n])
		recs = recs[n:]
	}
	pt.chunk.release()
}

// chunk is a partition's scratch space for handleRecords, reused chunk
// after chunk: per record of the chunk, its input, kind, the fields the
// rules read (pipeline.Rec), the rules' filter verdicts and its key
// lookups; and the chunk's outputs. The decoded event and the filters'
// view of it are needed only while the record is decoded: one of each
// serves the whole chunk (kept here rather than on the stack: the rules'
// filters take the view by pointer into code escape analysis cannot
// follow, which would allocate it once per record), and what the rules'
// passes read of a record stays small enough for a chunk to stay in the
// CPU's first-level cache from one rule to the next.
type chunk struct {
	ins   []pipeline.Input
	kinds []recKind
	recs  []pipeline.Rec
	quals []bool // whether rule j's filter takes record k: quals[k*len(part.rs)+j]
	rkeys []string
	refs  [][]aggwindow.KeyRef
	pairs []dedup.Pair // record k's lookup in the store of keeper g: pairs[k*len(part.ks)+g]
	out   []pendingOut
	used  int // the most records a chunk held since release: what it clears
	ev    event.Event
	env   rules.Event
}

type recKind uint8

const (
	recValid   recKind = iota
	recInvalid         // failed validation: dead-lettered, counted by every rule
	recMarker          // a watermark marker of a repartition topic
)

// pendingOut is an output of record k of a chunk by rule (index in
// part.rs; -1 for the record's dead letters, len(part.rs) for its
// forwards), produced when the chunk ends. val is what the status page
// shows of an alert (nil for other outputs).
type pendingOut struct {
	k, rule int32
	rec     *kgo.Record
	alert   bool
	val     []byte
}

func cmpPendingOut(a, b pendingOut) int {
	if c := cmp.Compare(a.k, b.k); c != 0 {
		return c
	}
	return cmp.Compare(a.rule, b.rule)
}

// size makes room for n records, with r rules and g dedup stores.
func (c *chunk) size(n, r, g int) {
	if cap(c.pairs) < n*g {
		c.pairs = make([]dedup.Pair, n*g)
	}
	c.pairs = c.pairs[:n*g]
	clear(c.pairs)
	if cap(c.quals) < n*r {
		c.quals = make([]bool, n*r)
	}
	c.quals = c.quals[:n*r] // every valid record's are set before they are read
	c.used = max(c.used, n)
	if cap(c.ins) < n {
		c.ins = make([]pipeline.Input, n)
		c.kinds = make([]recKind, n)
		c.recs = make([]pipeline.Rec, n)
		c.rkeys = make([]string, n)
		c.refs = make([][]aggwindow.KeyRef, n)
	}
	c.ins, c.kinds, c.recs = c.ins[:n], c.kinds[:n], c.recs[:n]
	c.rkeys, c.refs = c.rkeys[:n], c.refs[:n]
}

// release drops the chunk's references to records, events and outputs,
// so that a partition that goes quiet does not hold its last fetch.
func (c *chunk) release() {
	n := c.used
	clear(c.ins[:n])
	clear(c.recs[:n])
	c.ev, c.env = event.Event{}, rules.Event{}
	clear(c.rkeys[:n])
	clear(c.refs[:n])
	clear(c.pairs[:cap(c.pairs)]) // the last chunk's key states and ids
	c.used = 0
	if cap(c.out) > maxKeptOut {
		// A chunk with unusually many outputs (a watermark marker that
		// closes every window of a partition) leaves no buffer of its size
		// behind with the partition.
		c.out = nil
	}
}

// maxKeptOut is the most pending outputs whose room a chunk keeps from one
// handleRecords to the next: about 48 KB, many times what a chunk of
// chunkRecords records usually emits.
const maxKeptOut = 4 * chunkRecords

// handleChunk handles recs (at most chunkRecords): decoding in record
// order, then the rules one after the other, then the outputs.
func (p *Processor) handleChunk(ctx context.Context, pt *part, recs []*kgo.Record) {
	c := &pt.chunk
	c.size(len(recs), len(pt.rs), len(pt.ks))
	src := pt.src
	for k, r := range recs {
		in := &c.ins[k]
		*in = pipeline.Input{
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli(),
		}
		if len(r.Headers) > 0 {
			in.Headers = make([]pipeline.Header, len(r.Headers))
			for i, h := range r.Headers {
				in.Headers[i] = pipeline.Header{Key: h.Key, Value: h.Value}
			}
		}
		if src.markers && pipeline.IsMarker(in) {
			c.kinds[k] = recMarker
			continue
		}
		pt.fwd.next = r.Offset + 1
		ev, verr := src.check.Check(in)
		if verr != nil {
			c.kinds[k] = recInvalid
			pt.stats.dlq[string(verr.Reason)]++
			for i, topic := range src.dlqs {
				c.out = append(c.out, pendingOut{k: int32(k), rule: -1,
					rec: outRecord(topic, pipeline.DeadLetterOutput(*in, verr, src.dlqRules[i]))})
			}
			continue
		}
		c.kinds[k] = recValid
		c.ev = ev
		c.recs[k] = pipeline.RecOf(&c.ev, in)
		// The filters' view of the record, built once for every rule, and
		// every rule's verdict on it, while it is in the cache.
		c.env = pipeline.EnvOf(&c.ev)
		qs := c.quals[k*len(pt.rs) : (k+1)*len(pt.rs)]
		for j, rp := range pt.rs {
			qs[j] = rp.win.Match(&c.env)
		}
		c.rkeys[k], c.refs[k] = pt.refsFor(&c.ev)
		for g, kp := range pt.ks {
			// One lookup of the record in each shared dedup store for
			// all the rules of the store, its index slot loading while
			// the chunk's other records are decoded.
			m := pt.rs[kp.t.group.Members[0]]
			m.win.PrepareDedupPair(&c.pairs[k*len(pt.ks)+g], m.t.stage.KeyOf(&c.ev), c.ev.EventID)
		}
		if len(src.forwards) > 0 {
			pt.fwd.max = max(pt.fwd.max, ev.TS)
			pt.fwd.active = p.now()
		}
		for _, t := range src.forwards {
			c.out = append(c.out, pendingOut{k: int32(k), rule: int32(len(pt.rs)), rec: &kgo.Record{
				Topic: t.input, Key: []byte(t.stage.KeyOf(&ev)), Value: r.Value, Timestamp: r.Timestamp,
				Headers: append(slices.Clip(r.Headers),
					kgo.RecordHeader{Key: pipeline.HeaderSourceTopic, Value: []byte(r.Topic)},
					kgo.RecordHeader{Key: pipeline.HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
					kgo.RecordHeader{Key: pipeline.HeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)}),
			}})
		}
	}
	for j, rp := range pt.rs {
		p.applyChunk(pt, j, rp)
	}
	if len(c.out) == 0 {
		return
	}
	// Each rule appended its outputs in record order, after the dead
	// letters and forwards: a stable sort by (record, rule) is the order
	// of a record-major loop.
	slices.SortStableFunc(c.out, cmpPendingOut)
	for i := range c.out {
		o := &c.out[i]
		if o.alert {
			pt.stats.vals = append(pt.stats.vals, o.val)
			pt.stats.ts = append(pt.stats.ts, recs[o.k].Timestamp)
		}
		p.emit(ctx, pt, o.rec)
	}
	clear(c.out)
	c.out = c.out[:0]
}

// applyChunk runs the records of pt's chunk through rule j (rp), in order.
func (p *Processor) applyChunk(pt *part, j int, rp *rulePart) {
	c := &pt.chunk
	t := rp.t
	k := 0 // the record being applied, for emit
	emit := func(o pipeline.Output) {
		out := pendingOut{k: int32(k), rule: int32(j)}
		var topic string
		switch o.Kind {
		case pipeline.Alert:
			topic = t.alerts
			pt.stats.alerts[o.Status]++
			out.alert, out.val = true, displayValue(o)
		case pipeline.DeadLetter:
			topic = t.dlq
			pt.stats.dlq[o.Reason]++
		case pipeline.TooLate:
			topic = t.late
		}
		out.rec = outRecord(topic, o)
		c.out = append(c.out, out)
	}
	for k = range c.kinds {
		switch c.kinds[k] {
		case recMarker:
			// A marker's outputs are alerts of windows it closes.
			err := t.stage.Marker(rp.win, c.ins[k], &rp.batchAcct, func(o pipeline.Output) {
				pt.stats.alerts[o.Status]++
				c.out = append(c.out, pendingOut{k: int32(k), rule: int32(j), rec: outRecord(t.alerts, o),
					alert: true, val: displayValue(o)})
			})
			if err != nil {
				p.log.Warn("consume: bad watermark marker skipped", "err", err)
			}
		case recInvalid:
			rp.batchAcct.Records++
			rp.batchAcct.NextOffset = c.ins[k].Offset + 1
			rp.batchAcct.DeadLettered++
		default:
			if refs := c.refs[k]; refs != nil && rp.aggIdx >= 0 {
				rp.win.UseKeyRef(c.rkeys[k], &refs[rp.aggIdx])
			}
			if rp.ddIdx >= 0 {
				rp.win.UseDedupPair(&c.pairs[k*len(pt.ks)+rp.ddIdx])
			}
			t.stage.ApplyRec(rp.win, &c.recs[k], c.quals[k*len(pt.rs)+j], &c.ins[k], &rp.batchAcct, emit)
		}
	}
	if rp.ddIdx >= 0 {
		rp.win.UseDedupPair(nil)
	}
}
