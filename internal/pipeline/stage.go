package pipeline

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/watermark"
	"github.com/vibeline/processor/internal/window"
)

// EvidenceLimit is how many events an aggregating rule's alert names as
// evidence (the sliding rule names its N firing events).
const EvidenceLimit = 10

// Options configure a Stage beyond its rule.
type Options struct {
	// MaxFutureSkewMs: an event more than this ahead of its record
	// timestamp is dead-lettered as clock_ahead. <= 0: the default (5m).
	MaxFutureSkewMs int64
	// Repartitioned: the stage reads the rule's repartition topic, whose
	// records are keyed by the rule's key (the source stage already checked
	// the record key against machine_id), so the key check is skipped.
	Repartitioned bool
	// Decoder decodes record values (docs/AVRO.md: the Avro decoder of an
	// Avro source); nil is JSON. Validation after decoding is the same for
	// every decoder (event.Validator).
	Decoder event.Decoder
	// EncodeAlert writes alert revisions (the Avro alert encoder); nil is
	// alerts.Alert.Encode (JSON).
	EncodeAlert func(alerts.Alert) ([]byte, error)
	// DeadLetterRules is the dlq.rules value of the dead letters Process
	// writes (HeaderDeadLetterRules: the rules that write one letter of the
	// record to this rule's dead-letter topic, DeadLetterRules); nil names
	// the stage's rule alone.
	DeadLetterRules []byte
}

// Stage applies one compiled rule to one input partition's records. It is
// immutable and safe for concurrent use; the Partitions it makes are not.
type Stage struct {
	// What every record reads, first and apart from the compiled rule:
	// one cache line of the stage per rule and record.
	delayMs     int64 // c.DelayMs
	keyBySensor bool  // c.Rule.Key is sensor_id
	c           *rules.Compiled
	o           Options
	valid       *event.Validator
	win         window.Config     // sliding rules
	agg         aggwindow.Config  // aggregating rules (Fires set per partition)
	wm          *watermark.Config // adaptive watermark; nil for a fixed delay
	desc        string
}

// NewStage builds the stage of the rule block (the vibration rule); see
// config.LegacyRule.
func NewStage(rule config.Rule) (*Stage, error) {
	c := config.Default()
	c.Rule = rule
	r, err := rules.Compile(c.LegacyRule())
	if err != nil {
		return nil, fmt.Errorf("pipeline: rule %s: %w", rule.ID, err)
	}
	return NewRuleStage(r, Options{MaxFutureSkewMs: rule.MaxFutureSkew.Milliseconds()})
}

// NewRuleStage builds the stage of a compiled rule.
func NewRuleStage(c *rules.Compiled, o Options) (*Stage, error) {
	if o.MaxFutureSkewMs <= 0 {
		o.MaxFutureSkewMs = event.DefaultMaxFutureSkewMs
	}
	if o.DeadLetterRules == nil {
		o.DeadLetterRules = EncodeDeadLetterRules([]RuleVersion{{ID: c.Rule.ID, Version: c.Rule.Version}})
	}
	s := &Stage{
		delayMs:     c.DelayMs,
		keyBySensor: c.Rule.Key == "sensor_id",
		c:           c,
		o:           o,
		valid:       event.NewValidator(o.Decoder, event.Options{MaxFutureSkewMs: o.MaxFutureSkewMs}),
		desc:        c.Rule.Description,
	}
	if w := c.Rule.Watermark; w.Strategy == rules.WatermarkAdaptive {
		s.wm = &watermark.Config{
			Strategy: watermark.Adaptive, DelayMs: c.DelayMs, Percentile: w.Percentile,
			MinMs: w.Min.Ms(), MaxMs: w.Max.Ms(), Sample: w.Sample,
		}
		if err := s.wm.Validate(); err != nil {
			return nil, fmt.Errorf("pipeline: rule %s: %w", c.Rule.ID, err)
		}
	}
	id, ver := c.Rule.ID, c.Rule.Version
	if c.Rule.Window.Type == rules.Sliding {
		s.win = window.Config{
			Threshold:      c.N,
			SizeMs:         c.SizeMs,
			DelayMs:        c.DelayMs,
			LatenessMs:     c.LatenessMs,
			DedupHorizonMs: c.DedupHorizonMs,
			AlertID:        func(key, first string) string { return alerts.ID(id, ver, key, first) },
		}
		if err := s.win.Validate(); err != nil {
			return nil, fmt.Errorf("pipeline: rule %s: %w", id, err)
		}
		return s, nil
	}
	s.agg = aggwindow.Config{
		SizeMs: c.SizeMs, AdvanceMs: c.AdvanceMs, GapMs: c.GapMs,
		DelayMs: c.DelayMs, LatenessMs: c.LatenessMs, EvidenceLimit: EvidenceLimit,
		Fires:             func(float64, int) bool { return false }, // replaced per partition
		FiresIgnoresCount: !c.ThresholdUsesCount(),
		AlertID:           func(key string, start int64) string { return alerts.ID(id, ver, key, strconv.FormatInt(start, 10)) },
	}
	switch c.Rule.Window.Type {
	case rules.Tumbling:
		s.agg.Kind = aggwindow.Tumbling
	case rules.Hopping:
		s.agg.Kind = aggwindow.Hopping
	case rules.Session:
		s.agg.Kind = aggwindow.Session
	}
	switch c.Rule.Aggregate.Fn {
	case rules.FnCount:
		s.agg.Fn = aggwindow.Count
	case rules.FnSum:
		s.agg.Fn = aggwindow.Sum
	case rules.FnAvg:
		s.agg.Fn = aggwindow.Avg
	case rules.FnMin:
		s.agg.Fn = aggwindow.Min
	case rules.FnMax:
		s.agg.Fn = aggwindow.Max
	}
	if err := s.agg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: rule %s: %w", id, err)
	}
	return s, nil
}

// Rule is the stage's compiled rule.
func (s *Stage) Rule() *rules.Compiled { return s.c }

// Sliding reports whether the rule is a record-aligned sliding rule.
func (s *Stage) Sliding() bool { return s.c.Rule.Window.Type == rules.Sliding }

// WindowConfig is the window configuration of a sliding rule.
func (s *Stage) WindowConfig() window.Config { return s.win }

// Check decodes and validates one record (SPEC.md section 4 step 1): the
// event, or the reason it is dead-lettered.
func (s *Stage) Check(in *Input) (event.Event, *event.Error) {
	key := in.Key
	if s.o.Repartitioned {
		key = nil
	}
	return s.valid.Check(key, in.Value, in.TimestampMs)
}

// Process runs one record through SPEC.md section 4 against the partition's
// state, counts it in acct and passes each output to emit, in order.
func (s *Stage) Process(w *Partition, in Input, acct *Accounting, emit func(Output)) {
	ev, verr := s.Check(&in)
	if verr != nil {
		acct.Records++
		acct.NextOffset = in.Offset + 1
		acct.DeadLettered++
		emit(s.DeadLetter(in, verr))
		return
	}
	s.Apply(w, &ev, in, acct, emit)
}

// DeadLetter is the dead letter Process writes of a record that failed
// validation: DeadLetterOutput with the stage's dlq.rules value
// (Options.DeadLetterRules).
func (s *Stage) DeadLetter(in Input, verr *event.Error) Output {
	return DeadLetterOutput(in, verr, s.o.DeadLetterRules)
}

// DeadLetterOutput is the dead letter of a record that failed validation:
// the original key, value and headers, then error.reason, error.detail,
// dlq.rules = named (HeaderDeadLetterRules) and source.*. The header is
// set, not added: a dlq.rules header the record carried (a stale one, on a
// record re-injected by hand or by an older processor dlq replay) is left
// out of the copied headers, so a letter names the rules that wrote it and
// no others. named nil writes a letter as processors did before the header
// existed (no dlq.rules, the original headers all kept): reconcile uses it
// to recognise such letters.
func DeadLetterOutput(in Input, verr *event.Error, named []byte) Output {
	extra := []Header{{HeaderErrorReason, []byte(verr.Reason)}, {HeaderErrorDetail, []byte(verr.Detail)}}
	if named != nil {
		in.Headers = withoutDeadLetterRules(in.Headers)
		extra = append(extra, Header{HeaderDeadLetterRules, named})
	}
	out := Output{
		Kind: DeadLetter, Key: in.Key, Value: in.Value, Reason: string(verr.Reason),
		Headers: copyHeaders(in, extra...),
	}
	size := len(out.Key) + len(out.Value) + headersBytes(out.Headers)
	if size <= MaxDeadLetterBytes {
		return out
	}
	omitted := "value"
	out.Value = nil
	if len(out.Key)+headersBytes(out.Headers) > MaxDeadLetterBytes-100 {
		omitted, out.Key = "value,key", nil
	}
	if headersBytes(out.Headers) > MaxDeadLetterBytes-100 {
		omitted = "value,key,headers"
		// (dlq.rules is at most MaxDeadLetterRulesBytes: what is left fits.)
		out.Headers = copyHeaders(Input{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, TimestampMs: in.TimestampMs}, extra...)
	}
	out.Headers = append(out.Headers, Header{HeaderOmitted, []byte(omitted)},
		Header{HeaderOriginalBytes, strconv.AppendInt(nil, int64(size), 10)})
	return out
}

// headersBytes is the encoded size of headers in a record, about: their
// bytes and, per header, its two length varints (at most 10 bytes).
func headersBytes(hs []Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// KeyOf returns the value of the rule's key field of ev.
func (s *Stage) KeyOf(ev *event.Event) string {
	if s.keyBySensor {
		return ev.SensorID
	}
	return ev.MachineID
}

// EnvOf is ev as the filter expressions see it. Several rules reading one
// record can share it (ApplyEnv).
func EnvOf(ev *event.Event) rules.Event {
	return rules.Event{
		EventID: ev.EventID, MachineID: ev.MachineID, SensorID: ev.SensorID, TS: ev.TS, Seq: ev.Seq,
		Value: ev.Value, Unit: ev.Unit, Quality: ev.Quality, Clock: ev.Clock, SchemaVersion: int64(ev.SchemaVersion),
	}
}

// Apply runs steps 2 to 7 for a validated event (Check passed).
func (s *Stage) Apply(w *Partition, ev *event.Event, in Input, acct *Accounting, emit func(Output)) {
	w.env = EnvOf(ev)
	s.ApplyEnv(w, ev, &w.env, &in, acct, emit)
}

// ApplyEnv is Apply with the filter environment of ev built by the caller
// (EnvOf(ev)), once for all the rules that read the record. It is only
// read, as in is.
func (s *Stage) ApplyEnv(w *Partition, ev *event.Event, env *rules.Event, in *Input, acct *Accounting, emit func(Output)) {
	r := RecOf(ev, in)
	s.ApplyRec(w, &r, w.Match(env), in, acct, emit)
}

// Rec is what a rule's ApplyRec reads of a validated record on its way
// through the windows: the event's fields the rules use and the input's
// position. A caller that takes a chunk of records through one rule after
// the other (package consume) keeps one Rec per record, about 90 bytes
// where the decoded event and the input are about 250, so that a chunk's
// records stay in the CPU's first-level cache from one rule to the next.
type Rec struct {
	MachineID, SensorID, EventID string
	TS                           int64
	Value                        float64
	Offset                       int64
	TimestampMs                  int64 // the Kafka record's timestamp
	Partition                    int32
}

// RecOf is the Rec of ev, decoded from in.
func RecOf(ev *event.Event, in *Input) Rec {
	var r Rec // field by field: see applyAgg
	r.MachineID, r.SensorID, r.EventID = ev.MachineID, ev.SensorID, ev.EventID
	r.TS, r.Value = ev.TS, ev.Value
	r.Offset, r.TimestampMs, r.Partition = in.Offset, in.TimestampMs, in.Partition
	return r
}

// Match reports whether the rule's filter takes the event env (step 2).
// A caller may evaluate it for a record ahead of ApplyRec: the filter has
// no state.
func (w *Partition) Match(env *rules.Event) bool {
	ok, err := w.filter.Match(env)
	return ok && err == nil // an error is not expected: the rule language cannot fail at run time
}

// keyOf is KeyOf of the record r.
func (s *Stage) keyOf(r *Rec) string {
	if s.keyBySensor {
		return r.SensorID
	}
	return r.MachineID
}

// ApplyRec is ApplyEnv with the record's fields in r (RecOf(ev, in)) and
// the filter's verdict on it (Match) taken by the caller. in is the
// record r came from, read only for its headers (a repartitioned rule's
// source partition) and for a too-late copy.
func (s *Stage) ApplyRec(w *Partition, r *Rec, qualifies bool, in *Input, acct *Accounting, emit func(Output)) {
	acct.Records++
	acct.NextOffset = r.Offset + 1
	key := s.keyOf(r)
	d := s.delayMs
	if w.tr != nil {
		d = w.tr.DelayMs()
	}
	switch {
	case s.o.Repartitioned:
		w.alignDelay(sourcePartition(in.Headers, in.Partition), r.TS, d)
	case w.tr != nil:
		w.setDelay(d)
	}
	var (
		outcome    window.Outcome
		watermark  int64
		latenessMs int64
		slideRevs  []window.Revision
		aggRevs    []aggwindow.Revision
	)
	if w.slide != nil {
		var e window.Event // field by field: see applyAgg (and ProcessTo)
		e.Key, e.EventID, e.SensorID, e.TS, e.Value = key, r.EventID, r.SensorID, r.TS, r.Value
		e.Partition, e.Offset = r.Partition, r.Offset
		var res window.Result
		w.slide.ProcessTo(&res, &e, qualifies)
		outcome, watermark, latenessMs, slideRevs = res.Outcome, res.Watermark, res.LatenessMs, res.Revisions
	} else {
		outcome, watermark, latenessMs, aggRevs = w.applyAgg(key, r, qualifies)
	}
	if w.tr != nil {
		// The tracker sees the record after the window did (package
		// watermark): the delay of a record depends on the records before
		// it only.
		if outcome == window.Processed || outcome == window.TooLate {
			if w.tr.ObserveEvent(r.TimestampMs, r.TS, s.c.LatenessMs, watermark) {
				w.atRisk++
			}
		} else {
			w.tr.Observe(r.TimestampMs, r.TS)
		}
		w.extraDirty = true
	}
	switch outcome {
	case window.Processed:
		acct.Processed++
	case window.Filtered:
		acct.Filtered++
	case window.Duplicate:
		acct.Duplicate++
	case window.TooLate:
		acct.TooLate++
		emit(s.tooLate(in, watermark, latenessMs))
	}
	if len(slideRevs) > 0 || len(aggRevs) > 0 {
		// Most records change no alert: no call for them.
		s.emitRevisions(w, slideRevs, aggRevs, emit)
	}
}

// tooLate is the too-late side output of in, a copy of the input record
// with the headers of SPEC.md section 5. Not inlined: ApplyRec's frame
// stays small for the records that are not late.
//
//go:noinline
func (s *Stage) tooLate(in *Input, watermark, latenessMs int64) Output {
	return Output{
		Kind: TooLate, Key: in.Key, Value: in.Value,
		Headers: copyHeaders(*in,
			Header{HeaderLateReason, []byte("too_late")},
			Header{HeaderLateWatermark, []byte(alerts.FormatTime(watermark))},
			Header{HeaderLatenessMs, strconv.AppendInt(nil, latenessMs, 10)},
			Header{HeaderLateRule, []byte(s.c.Rule.ID)},
			Header{HeaderLateRuleVersion, strconv.AppendInt(nil, int64(s.c.Rule.Version), 10)}),
	}
}

// emitRevisions emits the alerts of revisions, through the rule's cooldown.
func (s *Stage) emitRevisions(w *Partition, slide []window.Revision, agg []aggwindow.Revision, emit func(Output)) {
	for _, rev := range slide {
		if w.pass(s.c.CooldownMs, rev.Key, rev.AlertID, rev.Status == window.Open, rev.Status == window.Closed || rev.Status == window.Merged, rev.End) {
			emit(s.slideAlert(rev))
		}
	}
	for _, rev := range agg {
		if w.pass(s.c.CooldownMs, rev.Key, rev.AlertID, rev.Status == aggwindow.Open, rev.Status == aggwindow.Closed || rev.Status == aggwindow.Merged, rev.End) {
			emit(s.aggAlert(rev))
		}
	}
}

func (s *Stage) slideAlert(rev window.Revision) Output {
	return s.encode(s.alertOf(rev.AlertID, rev.Revision, rev.Status.String(), rev.MergedInto, rev.Start, rev.End,
		rev.Count, rev.Late, rev.Watermark, evidenceOf(rev.Evidence)), rev.Key, nil)
}

func (s *Stage) aggAlert(rev aggwindow.Revision) Output {
	return s.encode(s.alertOf(rev.AlertID, rev.Revision, rev.Status.String(), rev.MergedInto, rev.Start, rev.End,
		rev.Count, rev.Late, rev.Watermark, evidenceOf(rev.Evidence)), rev.Key, &alerts.Aggregate{Fn: s.c.Rule.Aggregate.Fn, Value: rev.Agg})
}

// alertOf is the alert of a revision of either window package.
func (s *Stage) alertOf(id string, revision int, status, mergedInto string, start, end int64, count int, late bool, wm int64, ev []alerts.Evidence) alerts.Alert {
	return alerts.Alert{
		AlertID: id, Revision: revision, Status: status, MergedInto: mergedInto,
		RuleID: s.c.Rule.ID, RuleVersion: s.c.Rule.Version,
		Start: start, End: end, Count: count, Late: late, Watermark: wm, Evidence: ev,
	}
}

// evidenceOf converts the evidence of either window package (the same
// fields) to the alert's.
func evidenceOf[E window.Evidence | aggwindow.Evidence](es []E) []alerts.Evidence {
	out := make([]alerts.Evidence, len(es))
	for i, e := range es {
		out[i] = alerts.Evidence(e)
	}
	return out
}

// Watermark marker headers: a forwarder reports on each source partition
// it owns to every partition of a repartition topic with a record without
// key or value carrying these headers (see Stage.Marker).
const (
	HeaderMarkerSource     = "wm.source"     // the source partition
	HeaderMarkerPartitions = "wm.partitions" // the source topic's partition count
	HeaderMarkerMaxTS      = "wm.max_ts"     // largest event time forwarded from it, ms (NoWatermark: none)
	HeaderMarkerIdle       = "wm.idle"       // "1": caught up with its end, "0": not
)

// MarkerRecord returns the marker of a source partition.
func MarkerRecord(src int32, partitions int, maxTS int64, idle bool) []Header {
	i := "0"
	if idle {
		i = "1"
	}
	return []Header{
		{HeaderMarkerSource, strconv.AppendInt(nil, int64(src), 10)},
		{HeaderMarkerPartitions, strconv.AppendInt(nil, int64(partitions), 10)},
		{HeaderMarkerMaxTS, strconv.AppendInt(nil, maxTS, 10)},
		{HeaderMarkerIdle, []byte(i)},
	}
}

// IsMarker reports whether a record of a repartition topic is a watermark
// marker rather than an event.
func IsMarker(in *Input) bool {
	return len(in.Key) == 0 && len(in.Value) == 0 && len(in.Headers) > 0 && in.Headers[0].Key == HeaderMarkerSource
}

// Marker applies a watermark marker to a repartitioned rule's partition:
// the watermark may move and windows close. A marker is not an event: it
// moves the accounting's next offset but is not counted as a record.
func (s *Stage) Marker(w *Partition, in Input, acct *Accounting, emit func(Output)) error {
	acct.NextOffset = in.Offset + 1
	var src, n, maxTS int64
	idle := false
	var err error
	for _, h := range in.Headers {
		switch h.Key {
		case HeaderMarkerSource:
			src, err = strconv.ParseInt(string(h.Value), 10, 32)
		case HeaderMarkerPartitions:
			n, err = strconv.ParseInt(string(h.Value), 10, 32)
		case HeaderMarkerMaxTS:
			maxTS, err = strconv.ParseInt(string(h.Value), 10, 64)
		case HeaderMarkerIdle:
			idle = string(h.Value) == "1"
		}
		if err != nil {
			return fmt.Errorf("pipeline: marker at %s/%d@%d: header %s: %w", in.Topic, in.Partition, in.Offset, h.Key, err)
		}
	}
	if src < 0 || n < 1 || src >= n {
		return fmt.Errorf("pipeline: marker at %s/%d@%d: source partition %d of %d", in.Topic, in.Partition, in.Offset, src, n)
	}
	d := s.delayMs
	if w.tr != nil {
		d = w.tr.DelayMs()
	}
	slide, agg := w.marker(int32(src), int(n), maxTS, idle, d)
	s.emitRevisions(w, slide, agg, emit)
	return nil
}

// sourcePartition is the source partition a repartitioned record came
// from: its last source.partition header (the forwarder appends it after
// the original headers), else def.
func sourcePartition(hs []Header, def int32) int32 {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == HeaderSourcePartition {
			if n, err := strconv.ParseInt(string(hs[i].Value), 10, 32); err == nil && n >= 0 {
				return int32(n)
			}
			return def
		}
	}
	return def
}

// keyNoun names what the rule's key identifies, for alert reasons.
func (s *Stage) keyNoun() string {
	if s.c.Rule.Key == "sensor_id" {
		return "sensor"
	}
	return "machine"
}

// encode fills the key, aggregate and reason of a and encodes it.
func (s *Stage) encode(a alerts.Alert, key string, agg *alerts.Aggregate) Output {
	if s.c.Rule.Key == rules.DefaultKey {
		a.MachineID = key
	} else {
		a.KeyField, a.Key = s.c.Rule.Key, key
	}
	a.Aggregate = agg
	reason := alerts.Reason{
		Status: a.Status, Count: a.Count, What: s.desc, Aggregate: agg,
		Noun: s.keyNoun(), Key: key, Start: a.Start, End: a.End, MergedInto: a.MergedInto,
	}
	a.Reason = reason.String()
	val, js, err := s.encodeValue(&a)
	if err == nil && !fits(val, js) {
		val, js, err = s.fit(a)
	}
	if err != nil {
		// The windows only emit well-formed revisions; if one ever is not,
		// the alert still goes out, marked, rather than vanishing.
		val = fmt.Appendf(nil, `{"alert_id":%q,"revision":%d,"encode_error":%q}`, a.AlertID, a.Revision, err.Error())
	}
	return Output{Kind: Alert, Key: []byte(key), Value: val, JSON: js, Status: a.Status}
}

// alertScratchBytes is the size of encodeValue's stack buffer: an alert
// with EvidenceLimit events and ids of usual length is about 1.5 KB.
const alertScratchBytes = 4096

// encodeValue returns a's record value and, when that is not JSON (Avro
// alerts), its JSON for the status page; js is nil for JSON alerts.
func (s *Stage) encodeValue(a *alerts.Alert) (val, js []byte, err error) {
	if s.o.EncodeAlert == nil {
		// Encoded on the stack, then copied into an allocation of the
		// value's size: Encode's own buffer is an upper bound of it, about
		// twice the size for an alert with ten evidence events. A value
		// that may not fit the scratch buffer is encoded on the heap, then
		// copied all the same (returning that buffer instead would move the
		// scratch buffer to the heap too).
		var scratch [alertScratchBytes]byte
		v, err := a.AppendEncode(scratch[:0])
		if err != nil {
			return nil, nil, err
		}
		return bytes.Clone(v), nil, nil
	}
	val, err = s.o.EncodeAlert(*a)
	js, _ = a.Encode()
	return val, js, err
}

// fits reports whether an alert's value, and its JSON when the value is
// Avro, are at most MaxAlertBytes. Bounding the JSON of an Avro alert too
// (never smaller than the Avro value) makes the cut the same in both
// formats, so an Avro run names the evidence that the JSON reference
// recomputation (package reconcile) names.
func fits(val, js []byte) bool {
	return len(val) <= MaxAlertBytes && len(js) <= MaxAlertBytes
}

// fit encodes a, whose value is larger than MaxAlertBytes, with its evidence
// cut to the longest prefix that fits, EvidenceOmitted counting the events
// left out. The cut depends only on the alert (the encoding is a function
// of it), so replays cut alike. The prefix keeps the first evidence event,
// the one the alert id is derived from, whenever that alone fits. If not
// even it does (the other fields are bounded to tens of kilobytes by the
// id and rule validation, so this does not happen), the revision names no
// evidence and EvidenceOmitted is the whole list.
//
// The value's length only grows with the prefix (one more event adds far
// more than evidence_omitted loses), so a binary search finds the cut in
// about log2(len(evidence)) encodings; this path runs only for oversized
// revisions.
func (s *Stage) fit(a alerts.Alert) (val, js []byte, err error) {
	full, omitted := a.Evidence, a.EvidenceOmitted
	cut := func(k int) *alerts.Alert {
		a.Evidence, a.EvidenceOmitted = full[:k:k], omitted+len(full)-k
		return &a
	}
	// The smallest i in [0, n-1) for which the first i+1 events do not fit,
	// or n-1: then k = i events fit (the whole list does not).
	k := sort.Search(max(len(full)-1, 0), func(i int) bool {
		v, j, err := s.encodeValue(cut(i + 1))
		return err != nil || !fits(v, j)
	})
	return s.encodeValue(cut(k))
}
