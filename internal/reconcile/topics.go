package reconcile

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
)

// pos is a record's position in its topic.
type pos struct {
	p   int32
	off int64
}

func (at pos) String() string { return fmt.Sprintf("%d@%d", at.p, at.off) }

// decoded is what validation made of an input record: the event, or why
// it is dead-lettered.
type decoded struct {
	ev  event.Event
	err *event.Error
}

// topicData is one topic read read_committed, indexed by position. Rules
// sharing a topic share one read.
type topicData struct {
	name  string
	recs  []*kgo.Record
	byPos map[pos]*kgo.Record
	// start is each partition's log start offset: the records below it
	// were deleted (by retention, or, for a repartition topic, by the
	// processor once consumed).
	start map[int32]int64
	// events caches validation by position: a topic is always validated
	// the same way (a source with the record-key check, a repartition
	// topic without), whichever rule asks.
	events map[pos]decoded
	// byEventID indexes the valid records by event id (built on first use).
	byEventID map[string][]*kgo.Record
}

// reader reads each topic once.
type reader struct {
	ctx   context.Context
	o     Options
	fm    *formats
	cache map[string]*topicData
}

func newReader(ctx context.Context, o Options, fm *formats) *reader {
	return &reader{ctx: ctx, o: o, fm: fm, cache: map[string]*topicData{}}
}

// topic returns the committed records of name, with its log start offsets,
// the writer schemas of its values fetched (formats.prepareTopic).
func (rd *reader) topic(name string) (*topicData, error) {
	if t := rd.cache[name]; t != nil {
		return t, nil
	}
	recs, start, err := readCommitted(rd.ctx, rd.o.Config.Brokers, name, rd.o.Timeout, rd.o.Progress, rd.o.ExtraKgoOpts...)
	if err != nil {
		return nil, err
	}
	// The writer schemas of the topic's values, before any is decoded.
	if err := rd.fm.prepareTopic(rd.ctx, name, recs); err != nil {
		return nil, err
	}
	t := &topicData{name: name, recs: recs, byPos: make(map[pos]*kgo.Record, len(recs)), start: start, events: map[pos]decoded{}}
	for _, r := range recs {
		t.byPos[pos{r.Partition, r.Offset}] = r
	}
	rd.cache[name] = t
	return t, nil
}

// lookup returns the record at at; purged reports that there is none
// because it lies below its partition's log start (deleted).
func (t *topicData) lookup(at pos) (r *kgo.Record, purged bool) {
	if r := t.byPos[at]; r != nil {
		return r, false
	}
	return nil, at.off >= 0 && at.off < t.start[at.p]
}

// purgedIn is how many offsets of [from, to) of partition p lie below the
// log start: an upper bound of the records deleted there.
func (t *topicData) purgedIn(p int32, from, to int64) int64 {
	return max(0, min(to, t.start[p])-from)
}

// check validates r with st (cached by position).
func (t *topicData) check(st *pipeline.Stage, r *kgo.Record) decoded {
	at := pos{r.Partition, r.Offset}
	if d, ok := t.events[at]; ok {
		return d
	}
	in := toInput(r)
	ev, err := st.Check(&in)
	d := decoded{ev: ev, err: err}
	t.events[at] = d
	return d
}

// validate is check without filling the cache: for passes over every
// record, which would otherwise keep an event per input record in memory.
func (t *topicData) validate(st *pipeline.Stage, r *kgo.Record) decoded {
	if d, ok := t.events[pos{r.Partition, r.Offset}]; ok {
		return d
	}
	in := toInput(r)
	ev, err := st.Check(&in)
	return decoded{ev: ev, err: err}
}

// withEventID returns the valid records of the topic carrying event id id.
func (t *topicData) withEventID(st *pipeline.Stage, id string) []*kgo.Record {
	if t.byEventID == nil {
		t.byEventID = map[string][]*kgo.Record{}
		for _, r := range t.recs {
			if d := t.validate(st, r); d.err == nil {
				t.byEventID[d.ev.EventID] = append(t.byEventID[d.ev.EventID], r)
			}
		}
	}
	return t.byEventID[id]
}

// toInput converts a record to the pipeline's input.
func toInput(r *kgo.Record) pipeline.Input {
	in := pipeline.Input{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
		TimestampMs: r.Timestamp.UnixMilli()}
	in.Headers = headersOf(r)
	return in
}

func headersOf(r *kgo.Record) []pipeline.Header {
	if len(r.Headers) == 0 {
		return nil
	}
	hs := make([]pipeline.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
	}
	return hs
}

// isMarker reports whether a record of a repartition topic is a watermark
// marker (not an event, not counted by the accounting).
func isMarker(r *kgo.Record) bool {
	in := pipeline.Input{Key: r.Key, Value: r.Value, Headers: headersOf(r)}
	return pipeline.IsMarker(&in)
}

// lastHeader returns the value of the last header named key. The
// processor appends its own headers after the original ones, so the last
// occurrence is its own even when the original record carried one of the
// same name (a forwarded record carries the source's source.* headers).
func lastHeader(r *kgo.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

// copySource returns the topic and position a dead letter or too-late copy
// names in its source.* headers: the last ones (first=false), or the first
// ones (first=true: a repartitioned rule's copy also carries its source
// record's, appended when the record was forwarded).
func copySource(r *kgo.Record, first bool) (string, pos, bool) {
	get := func(key string) (string, bool) {
		if !first {
			return lastHeader(r, key)
		}
		for _, h := range r.Headers {
			if h.Key == key {
				return string(h.Value), true
			}
		}
		return "", false
	}
	topic, okT := get(pipeline.HeaderSourceTopic)
	ps, okP := get(pipeline.HeaderSourcePartition)
	os, okO := get(pipeline.HeaderSourceOffset)
	p, errP := strconv.ParseInt(ps, 10, 32)
	off, errO := strconv.ParseInt(os, 10, 64)
	if !okT || !okP || !okO || errP != nil || errO != nil || p < 0 || off < 0 {
		return "", pos{}, false
	}
	return topic, pos{int32(p), off}, true
}

// sameRecord reports whether a copy carries the original's key and value.
func sameRecord(orig, cp *kgo.Record) bool {
	return string(orig.Key) == string(cp.Key) && string(orig.Value) == string(cp.Value)
}
