// Package reconcile owns the after-the-fact proof that no alert was lost or
// doubled: it reads the input, alert, dead-letter, late and changelog
// topics read_committed and checks SPEC.md section 5 from the outside:
//
//   - no alert revision appears twice, and each alert's revisions are
//     0, 1, 2, ... in order, opening with "open" and ending at most once
//     with "closed" or "merged";
//   - every evidence sample exists in the input at its partition and offset,
//     has the alert's key, qualifies under the rule, and the evidence spans
//     at most the window;
//   - every input record up to the committed position is accounted for
//     exactly once (processed + filtered + duplicate + dead_lettered +
//     too_late = records, per partition), the dead-letter and late topics
//     hold exactly the counted records, each once;
//   - optionally (Recompute), the committed outputs equal a recomputation of
//     the pipeline over the same input prefix.
//
// With a rules file (Config.RulesFile) the same proof is made for every
// rule, against its own changelog and its share of the possibly shared
// output topics (rules.go): alerts chosen by rule id and version, too-late
// copies by their late.rule headers, dead letters by their dlq.rules header
// (letters.go; letters without it, of older processors, count for every
// version), once per distinct topic;
// evidence is checked against the rule's window type and filter. A
// repartitioned rule is checked against its repartition topic, with what
// the processor purged of it found in the source, and is not recomputed.
//
// Records are read in the processor's formats (formats.go): each source
// JSON or Avro (sources:), alerts JSON or Avro (alerts_format). Avro writer
// schemas are fetched from the registry when a topic has been read, before
// any of its records is judged; a registry that cannot answer is an error
// of the run, never a violation.
//
// It only reads; it never writes to Kafka.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/txn"
)

// Options configure a reconciliation.
type Options struct {
	Config config.Config
	// Recompute also reruns the pipeline over the committed input prefix
	// and compares every output record.
	Recompute bool
	// Timeout bounds reading each topic. Default 2m.
	Timeout time.Duration
	// Progress, if set, is called while reading with the topic, records read
	// and records expected.
	Progress func(topic string, read, total int64)
	// ExtraKgoOpts are appended to client options (TLS, SASL).
	ExtraKgoOpts []kgo.Opt
	// From and To bound the check to what was committed in [From, To)
	// (zero: unbounded): the input records whose accounting was committed
	// in the range (the offsets between the last accounting record of each
	// partition committed before From and the last committed before To), and
	// the alert revisions committed in the range. Recompute needs no range.
	From, To time.Time
}

// Report is the outcome.
type Report struct {
	InputRecords  int
	Alerts        int
	AlertIDs      int
	DeadLetters   int
	TooLate       int
	Partitions    map[int32]pipeline.Accounting
	Violations    []string
	Recomputed    bool
	ViolationsCap int
	// Rules is one section per rule of a rules file (empty for the rule:
	// block, whose report is the fields above).
	Rules []*RuleReport
	// Notes are what a check could not check, or checked another way (a
	// repartitioned rule's purged records), topic by topic; for the rule:
	// block, evidence left out of alerts (evidence_omitted).
	Notes []string
}

// OK reports whether no violation was found.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) violate(format string, args ...any) {
	if r.ViolationsCap == 0 {
		r.ViolationsCap = 50
	}
	if len(r.Violations) < r.ViolationsCap {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	} else if len(r.Violations) == r.ViolationsCap {
		r.Violations = append(r.Violations, "(more violations not shown)")
	}
}

// String renders the report for people.
func (r *Report) String() string {
	if len(r.Rules) > 0 {
		return r.rulesString()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "input records: %d\nalert revisions: %d (%d alerts)\ndead letters: %d\ntoo late: %d\n",
		r.InputRecords, r.Alerts, r.AlertIDs, r.DeadLetters, r.TooLate)
	parts := make([]int32, 0, len(r.Partitions))
	for p := range r.Partitions {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		a := r.Partitions[p]
		fmt.Fprintf(&b, "partition %d: next_offset %d records %d = processed %d + filtered %d + duplicate %d + dead_lettered %d + too_late %d\n",
			p, a.NextOffset, a.Records, a.Processed, a.Filtered, a.Duplicate, a.DeadLettered, a.TooLate)
	}
	if r.Recomputed {
		b.WriteString("recomputed outputs: compared\n")
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if r.OK() {
		b.WriteString("OK: no violation\n")
	} else {
		fmt.Fprintf(&b, "VIOLATIONS (%d):\n", len(r.Violations))
		for _, v := range r.Violations {
			b.WriteString("  - " + v + "\n")
		}
	}
	return b.String()
}

// Run reads the topics and checks them.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	cfg := o.Config
	if cfg.RulesFile != "" {
		// Every rule of the file, each against its own changelog and
		// outputs (rules.go). The checks below are those of the rule: block.
		return runRules(ctx, o)
	}
	rs, fm, err := rulesAndFormats(ctx, cfg)
	if err != nil {
		return nil, err
	}
	rep := &Report{Partitions: map[int32]pipeline.Accounting{}}
	group, err := groupPositions(ctx, o)
	if err != nil {
		return nil, err
	}
	fetch := func(topic string) ([]*kgo.Record, error) {
		recs, err := ReadCommitted(ctx, cfg.Brokers, topic, o.Timeout, o.Progress, o.ExtraKgoOpts...)
		if err != nil {
			return nil, err
		}
		// The writer schemas of the topic's values, before any is decoded.
		if err := fm.prepareTopic(ctx, topic, recs); err != nil {
			return nil, err
		}
		return recs, nil
	}
	// What the processor wrote is read before the input it was written
	// from: with the processor still running, the input read last holds
	// every record the changelog and the outputs read before it refer to
	// (and the checks count only what the changelog says was committed).
	pre := map[string][]*kgo.Record{}
	for _, topic := range []string{cfg.ChangelogTopic(), cfg.Topics.DLQ, cfg.Topics.Late, cfg.Topics.Alerts, cfg.Topics.Input} {
		if _, done := pre[topic]; done {
			continue
		}
		recs, err := fetch(topic)
		if err != nil {
			return nil, err
		}
		pre[topic] = recs
	}
	read := func(topic string) ([]*kgo.Record, error) {
		if recs, ok := pre[topic]; ok {
			return recs, nil
		}
		return fetch(topic)
	}
	input, err := read(cfg.Topics.Input)
	if err != nil {
		return nil, err
	}
	// The input's log starts, read after the input: a copy naming a record
	// below them names one that retention deleted (not checked).
	inputStart, err := logStarts(ctx, o, cfg.Topics.Input)
	if err != nil {
		return nil, err
	}
	rep.InputRecords = len(input)
	byPos := map[int32]map[int64]*kgo.Record{}
	for _, r := range input {
		if byPos[r.Partition] == nil {
			byPos[r.Partition] = map[int64]*kgo.Record{}
		}
		byPos[r.Partition][r.Offset] = r
	}
	changelog, err := read(cfg.ChangelogTopic())
	if err != nil {
		return nil, err
	}
	inRange := func(t time.Time) bool {
		return (o.From.IsZero() || !t.Before(o.From)) && (o.To.IsZero() || t.Before(o.To))
	}
	base := map[int32]pipeline.Accounting{} // the last accounting committed before From
	readAccounting(changelog, o.From, o.To, base, rep.Partitions, rep.violate)
	// committed reports whether an input record's accounting was committed
	// in the range.
	committed := func(p int32, off int64) bool {
		return off >= base[p].NextOffset && off < rep.Partitions[p].NextOffset
	}

	// Accounting per partition.
	inCount := map[int32]int64{}
	for _, r := range input {
		if committed(r.Partition, r.Offset) {
			inCount[r.Partition]++
		}
	}
	for p, top := range rep.Partitions {
		a := delta(top, base[p])
		if !top.Balanced() || !a.Balanced() {
			rep.violate("partition %d: accounting does not balance: %+v", p, a)
		}
		if a.Records != inCount[p] {
			rep.violate("partition %d: %d records counted, but the input holds %d records in offsets [%d, %d)", p, a.Records, inCount[p], base[p].NextOffset, top.NextOffset)
		}
	}
	// A partition without accounting: not processed yet, unless the group's
	// committed offset says the rule committed state there.
	ns := fmt.Sprintf("%s.v%d", rs[0].Rule.ID, rs[0].Rule.Version)
	seenParts := map[int32]bool{}
	for _, r := range input {
		if _, ok := rep.Partitions[r.Partition]; ok || seenParts[r.Partition] {
			continue
		}
		seenParts[r.Partition] = true
		if o.To.IsZero() && claimsState(group, cfg.Topics.Input, r.Partition, ns) { // the offsets are now's, not To's
			rep.violate("partition %d: the group's committed offset carries a changelog position of rule %s, but its changelog holds no accounting record for the partition", r.Partition, ns)
		}
	}

	// Dead letters and too-late copies: each counted input record once, for
	// this rule version. Copies of other versions (after processor replay
	// into a new version, the topics hold the older one's too) are counted
	// in a note: dead letters whose dlq.rules names other versions only,
	// too-late copies whose late.rule/late.rule_version do. Copies without
	// those headers (written by older processors) are this version's.
	for _, side := range []struct {
		topic string
		count func(pipeline.Accounting) int64
		n     *int
		owner func(*kgo.Record) letterOwner
		what  string
	}{
		{cfg.Topics.DLQ, func(a pipeline.Accounting) int64 { return a.DeadLettered }, &rep.DeadLetters,
			func(r *kgo.Record) letterOwner { return ownerOf(r, cfg.Rule.ID, cfg.Rule.Version) }, "dead letters"},
		{cfg.Topics.Late, func(a pipeline.Accounting) int64 { return a.TooLate }, &rep.TooLate, lateOwner(cfg.Rule.ID, cfg.Rule.Version), "too-late copies"},
	} {
		recs, err := read(side.topic)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		per := map[int32]int64{}
		others := map[string]int{}
		deleted := 0
		for _, r := range recs {
			switch side.owner(r) {
			case letterBad:
				v, _ := lastHeader(r, pipeline.HeaderDeadLetterRules)
				rep.violate("%s %d@%d: unreadable %s header %q", side.topic, r.Partition, r.Offset, pipeline.HeaderDeadLetterRules, v)
				continue
			case letterOther:
				others[copyRules(r)]++
				continue
			}
			*side.n++
			p, errP := strconv.ParseInt(header(r, pipeline.HeaderSourcePartition), 10, 32)
			off, errO := strconv.ParseInt(header(r, pipeline.HeaderSourceOffset), 10, 64)
			if errP != nil || errO != nil || header(r, pipeline.HeaderSourceTopic) != cfg.Topics.Input {
				rep.violate("%s %d@%d: bad source headers", side.topic, r.Partition, r.Offset)
				continue
			}
			pos := fmt.Sprintf("%d@%d", p, off)
			if seen[pos] {
				rep.violate("%s: input record %s appears twice for %s", side.topic, pos, ruleKey(cfg.Rule.ID, cfg.Rule.Version))
			}
			seen[pos] = true
			src := byPos[int32(p)][off]
			if src == nil && off < inputStart[int32(p)] {
				deleted++ // deleted by retention: nothing left to compare
			} else if src == nil {
				rep.violate("%s: input record %s does not exist", side.topic, pos)
			} else if string(src.Value) != string(r.Value) || string(src.Key) != string(r.Key) {
				rep.violate("%s: record %s does not carry the original key and value", side.topic, pos)
			}
			if committed(int32(p), off) {
				per[int32(p)]++
			}
		}
		for p, top := range rep.Partitions {
			if want := side.count(top) - side.count(base[p]); per[p] != want {
				rep.violate("partition %d: %d records in %s, accounting says %d", p, per[p], side.topic, want)
			}
		}
		if len(others) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %s of other rule versions (not checked): %s", side.topic, side.what, countList(others)))
		}
		if deleted > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d %s name input records below the log start of %s (deleted by retention): not checked", side.topic, deleted, side.what, cfg.Topics.Input))
		}
	}

	// Alerts.
	alertRecs, err := read(cfg.Topics.Alerts)
	if err != nil {
		return nil, err
	}
	ranged := alertRecs[:0:0]
	for _, r := range alertRecs {
		if inRange(r.Timestamp) {
			ranged = append(ranged, r)
		}
	}
	rep.Alerts = len(ranged)
	checkAlerts(rep, cfg, fm, ranged, byPos, inputStart, !o.From.IsZero())

	if o.Recompute {
		if !o.From.IsZero() || !o.To.IsZero() {
			return nil, errors.New("reconcile: --recompute checks the whole log; it takes no time range")
		}
		rep.Recomputed = true
		// Only this rule version's revisions are recomputed (another
		// version's stay on the topic after a replay; checkAlerts notes them).
		own := alertRecs[:0:0]
		for _, r := range alertRecs {
			if a, err := fm.decodeAlert(r.Value); err != nil || (a.RuleID == cfg.Rule.ID && a.RuleVersion == cfg.Rule.Version) {
				own = append(own, r)
			}
		}
		recompute(rep, cfg, fm, rs[0], input, own, committed, read)
	}
	return rep, nil
}

// readAccounting takes the accounting records ("a") of a rule's
// changelog: into base, per partition, the last one committed before from
// (none when from is zero), into top the last committed before to (zero:
// the last of all).
func readAccounting(changelog []*kgo.Record, from, to time.Time, base, top map[int32]pipeline.Accounting, violate func(string, ...any)) {
	for _, r := range changelog {
		if string(r.Key) != "a" || r.Value == nil {
			continue // a tombstone: a scratch start deleting an earlier history, with its new accounting after it
		}
		var a pipeline.Accounting
		if err := json.Unmarshal(r.Value, &a); err != nil {
			violate("changelog %d@%d: undecodable accounting record: %v", r.Partition, r.Offset, err)
			continue
		}
		if !from.IsZero() && r.Timestamp.Before(from) {
			base[r.Partition] = a
		}
		if to.IsZero() || r.Timestamp.Before(to) {
			top[r.Partition] = a
		}
	}
}

type alertState struct {
	next   int
	ended  bool
	status string
}

// nextRevision checks that a is the next revision of its alert: 0, 1,
// 2, ... in order, open first, nothing after a final closed or merged, and
// merged only when the rule's windows can merge; then records it. midway
// means the checked range starts after the beginning of the log, so an
// alert's first revision seen may be any.
func nextRevision(states map[string]*alertState, a *alerts.Alert, midway, merges bool, violate func(string, ...any)) {
	st := states[a.AlertID]
	if st == nil {
		st = &alertState{}
		if midway {
			st.next = a.Revision
		}
		states[a.AlertID] = st
	}
	switch {
	case st.ended:
		violate("alert %s: revision %d after its final %s revision", a.AlertID, a.Revision, st.status)
	case a.Revision != st.next:
		violate("alert %s: revision %d where %d was expected", a.AlertID, a.Revision, st.next)
	case a.Revision == 0 && a.Status != alerts.StatusOpen:
		violate("alert %s: revision 0 is %s, want open", a.AlertID, a.Status)
	case a.Revision > 0 && a.Status == alerts.StatusOpen:
		violate("alert %s: revision %d is open", a.AlertID, a.Revision)
	case a.Status == alerts.StatusMerged && !merges:
		violate("alert %s: revision %d is merged, but the rule's windows never merge", a.AlertID, a.Revision)
	}
	st.next = a.Revision + 1
	st.status = a.Status
	st.ended = a.Status == alerts.StatusClosed || a.Status == alerts.StatusMerged
}

// delta is the accounting of the records between two accounting records.
func delta(top, base pipeline.Accounting) pipeline.Accounting {
	return pipeline.Accounting{Version: top.Version, NextOffset: top.NextOffset,
		Records: top.Records - base.Records, Processed: top.Processed - base.Processed,
		Filtered: top.Filtered - base.Filtered, Duplicate: top.Duplicate - base.Duplicate,
		DeadLettered: top.DeadLettered - base.DeadLettered, TooLate: top.TooLate - base.TooLate}
}

// checkAlerts checks the alert revisions; midway means the range starts
// after the beginning, so an alert's first revision seen may be any.
// inputStart is the input's log start per partition: evidence below it
// was deleted by retention and is not checked.
func checkAlerts(rep *Report, cfg config.Config, fm *formats, recs []*kgo.Record, byPos map[int32]map[int64]*kgo.Record, inputStart map[int32]int64, midway bool) {
	valid := event.NewValidator(fm.decoder(cfg.Topics.Input), event.Options{MaxFutureSkewMs: max(cfg.Rule.MaxFutureSkew.Milliseconds(), 1)})
	states := map[string]*alertState{}
	seen := map[string]bool{}
	cut, omitted := 0, 0 // revisions with evidence left out, and how many events
	others := map[string]int{}
	deletedEvidence := 0
	for _, r := range recs {
		a, err := fm.decodeAlert(r.Value)
		if err != nil {
			rep.violate("alert %d@%d: undecodable: %v", r.Partition, r.Offset, err)
			continue
		}
		if a.RuleID != cfg.Rule.ID || a.RuleVersion != cfg.Rule.Version {
			// Another rule version's revisions stay on the topic after a
			// replay into a new version (RUNBOOK): not this rule's to check.
			others[ruleKey(a.RuleID, a.RuleVersion)]++
			continue
		}
		id := fmt.Sprintf("%s#%d", a.AlertID, a.Revision)
		if seen[id] {
			rep.violate("alert %s revision %d appears twice", a.AlertID, a.Revision)
			continue
		}
		seen[id] = true
		nextRevision(states, &a, midway, true, rep.violate)
		if string(r.Key) != a.MachineID {
			rep.violate("alert %s: record key %q is not its machine %q", a.AlertID, r.Key, a.MachineID)
		}
		if len(a.Evidence)+a.EvidenceOmitted != cfg.Rule.Threshold {
			rep.violate("alert %s rev %d: %s, want %d", a.AlertID, a.Revision, samples(&a), cfg.Rule.Threshold)
		}
		if a.EvidenceOmitted > 0 {
			cut++
			omitted += a.EvidenceOmitted
		}
		if n := len(a.Evidence); n > 0 && a.Evidence[n-1].TS-a.Evidence[0].TS > cfg.Rule.Window.Milliseconds() {
			rep.violate("alert %s rev %d: evidence spans %dms > window %s", a.AlertID, a.Revision, a.Evidence[n-1].TS-a.Evidence[0].TS, cfg.Rule.Window)
		}
		for _, e := range a.Evidence {
			src := byPos[e.Partition][e.Offset]
			if src == nil && e.Offset >= 0 && e.Offset < inputStart[e.Partition] {
				deletedEvidence++ // deleted by retention: nothing left to compare
				continue
			}
			if src == nil {
				rep.violate("alert %s rev %d: evidence %s at %d@%d is not in the input", a.AlertID, a.Revision, e.EventID, e.Partition, e.Offset)
				continue
			}
			ev, verr := valid.Check(src.Key, src.Value, src.Timestamp.UnixMilli())
			switch {
			case verr != nil:
				rep.violate("alert %s: evidence %d@%d is an invalid record (%s)", a.AlertID, e.Partition, e.Offset, verr.Reason)
			case ev.EventID != e.EventID || ev.TS != e.TS || ev.SensorID != e.SensorID || math.Abs(ev.Value-e.Value) > 1e-9:
				rep.violate("alert %s: evidence %s does not match the input record at %d@%d", a.AlertID, e.EventID, e.Partition, e.Offset)
			case ev.MachineID != a.MachineID:
				rep.violate("alert %s: evidence %s is of machine %s", a.AlertID, e.EventID, ev.MachineID)
			case ev.Value < cfg.Rule.MinValue || (cfg.Rule.Quality != "" && ev.Quality != cfg.Rule.Quality):
				rep.violate("alert %s: evidence %s does not qualify (value %v, quality %s)", a.AlertID, e.EventID, ev.Value, ev.Quality)
			}
		}
	}
	rep.AlertIDs = len(states)
	if cut > 0 {
		rep.Notes = append(rep.Notes, omittedNote(cut, omitted))
	}
	if len(others) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("alert revisions of other rules or rule versions (not checked): %s", countList(others)))
	}
	if deletedEvidence > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("evidence: %d samples name input records below the log start of %s (deleted by retention): not checked", deletedEvidence, cfg.Topics.Input))
	}
}

// recompute reruns the pipeline over the committed input prefix and compares.
// The rule is the rule block's, compiled as the processor compiles it
// (config.Rules), with the input's decoder.
func recompute(rep *Report, cfg config.Config, fm *formats, rule *rules.Compiled, input, alertRecs []*kgo.Record, committed func(int32, int64) bool,
	read func(string) ([]*kgo.Record, error)) {
	stage, err := pipeline.NewRuleStage(rule, pipeline.Options{MaxFutureSkewMs: cfg.Rule.MaxFutureSkew.Milliseconds(), Decoder: fm.decoder(cfg.Topics.Input)})
	if err != nil {
		rep.violate("recompute: %v", err)
		return
	}
	log := pipeline.Log{}
	for _, r := range input {
		if !committed(r.Partition, r.Offset) {
			continue
		}
		in := pipeline.Input{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			TimestampMs: r.Timestamp.UnixMilli()}
		for _, h := range r.Headers {
			in.Headers = append(in.Headers, pipeline.Header{Key: h.Key, Value: h.Value})
		}
		log[r.Partition] = append(log[r.Partition], in)
	}
	want, _ := stage.Reference(log)
	got := pipeline.Outputs{}
	add := func(kind pipeline.Kind, recs []*kgo.Record) {
		for _, r := range recs {
			hs := make([]pipeline.Header, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
			}
			value := r.Value
			if kind == pipeline.Alert {
				value = fm.comparable(r.Value, nil) // Avro alerts: as the reference's JSON
			}
			got.Add(kind, r.Key, value, hs)
		}
	}
	add(pipeline.Alert, alertRecs)
	// This version's copies (and older processors' without the headers),
	// as the run above chose them; dead letters with the rules they name
	// as this configuration names them (letterAsReference).
	dlqs, err := read(cfg.Topics.DLQ)
	if err != nil {
		rep.violate("recompute: read %s: %v", cfg.Topics.DLQ, err)
		return
	}
	byPos := map[pos]*kgo.Record{}
	for _, r := range input {
		byPos[pos{r.Partition, r.Offset}] = r
	}
	named := pipeline.DeadLetterRules([]*rules.Compiled{rule}, cfg.Topics.Input, cfg.Topics.DLQ)
	for _, r := range dlqs {
		if ownerOf(r, cfg.Rule.ID, cfg.Rule.Version).counts() {
			key, value, hs := letterAsReference(r, named, func(at pos) *kgo.Record { return byPos[at] }, func(o *kgo.Record) *event.Error {
				in := toInput(o)
				_, verr := stage.Check(&in)
				return verr
			})
			got.Add(pipeline.DeadLetter, key, value, hs)
		}
	}
	lates, err := read(cfg.Topics.Late)
	if err != nil {
		rep.violate("recompute: read %s: %v", cfg.Topics.Late, err)
		return
	}
	own := lateOwner(cfg.Rule.ID, cfg.Rule.Version)
	add(pipeline.TooLate, slices.DeleteFunc(slices.Clone(lates), func(r *kgo.Record) bool { return !own(r).counts() }))
	if d := pipeline.Diff(want, got.Canonical()); d != "" {
		rep.violate("committed outputs differ from a recomputation over the committed input:\n%s", d)
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// ReadCommitted reads topic from the start of every partition up to its high
// watermark at the time of the call, read_committed, and returns the
// committed data records in partition, then offset order. Transaction
// markers are read (not returned) to see progress past the last stable
// offset; an open transaction makes it wait, at most timeout.
func ReadCommitted(ctx context.Context, seeds []string, topic string, timeout time.Duration,
	progress func(string, int64, int64), extra ...kgo.Opt) ([]*kgo.Record, error) {
	out, _, err := readCommitted(ctx, seeds, topic, timeout, progress, extra...)
	return out, err
}

// groupPositions returns, per topic and partition, the changelog positions
// by rule namespace that the group's committed offsets carry (their commit
// metadata, internal/txn), read before any changelog: a position committed
// with an input offset was committed with its accounting, so the changelog
// read after it holds that accounting.
func groupPositions(ctx context.Context, o Options) (map[string]map[int32]map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cl, err := newClient(o)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, o.Config.GroupID)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil // no group yet: nothing committed
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: committed offsets of group %s: %w", o.Config.GroupID, err)
	}
	out := map[string]map[int32]map[string]int64{}
	offs.Each(func(r kadm.OffsetResponse) {
		if r.Err != nil || r.At < 0 {
			return
		}
		// v2 only: an older version's "v1 cl=<n>" does not say whose
		// position it is (after a version change it is not the rule's).
		pos, _ := txn.DecodePositions(r.Metadata)
		if out[r.Topic] == nil {
			out[r.Topic] = map[int32]map[string]int64{}
		}
		out[r.Topic][r.Partition] = pos
	})
	return out, nil
}

// claimsState reports whether the group's committed offset of topic
// partition p says the rule ns has committed state there: a position > 0
// of its changelog.
func claimsState(g map[string]map[int32]map[string]int64, topic string, p int32, ns string) bool {
	return g[topic][p][ns] > 0
}

// newClient returns a client of the configuration's brokers.
func newClient(o Options) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(o.Config.Brokers...)}, o.ExtraKgoOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("reconcile: client: %w", err)
	}
	return cl, nil
}

// logStarts returns the log start offset of every partition of topic.
func logStarts(ctx context.Context, o Options, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cl, err := newClient(o)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return listStarts(ctx, cl, topic)
}

// readCommitted is ReadCommitted that also returns each partition's log
// start offset (the records below it were deleted).
func readCommitted(ctx context.Context, seeds []string, topic string, timeout time.Duration,
	progress func(string, int64, int64), extra ...kgo.Opt) ([]*kgo.Record, map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: client: %w", err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: end offsets of %s: %w", topic, err)
	}
	logStart, err := listStarts(ctx, adm, topic)
	if err != nil {
		return nil, nil, err
	}
	end := map[int32]int64{}
	next := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		// A partition whose records were all deleted (start = end) has
		// nothing to wait for.
		if o.Offset > logStart[o.Partition] {
			end[o.Partition] = o.Offset
			next[o.Partition] = logStart[o.Partition]
			start[o.Partition] = kgo.NewOffset().AtStart()
			total += o.Offset - logStart[o.Partition]
		}
	})
	if len(start) == 0 {
		return nil, logStart, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: client: %w", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	var read int64
	done := func() bool {
		for p, e := range end {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			var behind []string
			for p, e := range end {
				if next[p] < e {
					behind = append(behind, fmt.Sprintf("%d (at %d of %d)", p, next[p], e))
				}
			}
			slices.Sort(behind)
			return nil, nil, fmt.Errorf("reconcile: reading %s did not finish within %s; partitions behind (an open transaction?): %s",
				topic, timeout, strings.Join(behind, ", "))
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, nil, fmt.Errorf("reconcile: fetch %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end[r.Partition] {
				return
			}
			next[r.Partition] = r.Offset + 1
			read++
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
		if progress != nil {
			progress(topic, read, total)
		}
	}
	slices.SortFunc(out, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	// The start offsets again: records may have been deleted while they
	// were read (a repartition topic's, by the running processor), and a
	// record that was not read must then count as deleted, not missing.
	if logStart, err = listStarts(ctx, adm, topic); err != nil {
		return nil, nil, err
	}
	return out, logStart, nil
}

// listStarts lists the log start offset of each partition of topic.
func listStarts(ctx context.Context, adm *kgo.Client, topic string) (map[int32]int64, error) {
	starts, err := kadm.NewClient(adm).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: start offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}
