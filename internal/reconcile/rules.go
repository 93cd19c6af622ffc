package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
)

// RuleReport is the section of one rule of a rules file.
type RuleReport struct {
	ID      string
	Version int
	Window  string // sliding, tumbling, hopping or session
	Source  string
	// Input is the topic whose records feed the rule's state: its source,
	// or its repartition topic when Repartitioned.
	Input         string
	Repartitioned bool
	AlertsTopic   string
	DLQTopic      string
	LateTopic     string
	Changelog     string
	// InputRecords is the number of records of Input read (a repartition
	// topic's watermark markers are not records); Checked those in the
	// checked range (committed, within From/To).
	InputRecords, Checked int
	// Alerts is the number of the rule's alert revisions in the range,
	// AlertIDs of its alerts.
	Alerts, AlertIDs int
	// DeadLetters and TooLate count the rule's copies on its dead-letter
	// and late topics (one per input record).
	DeadLetters, TooLate int
	// Partitions is the last accounting record committed in the range, per
	// partition of Input.
	Partitions map[int32]pipeline.Accounting
	Recomputed bool
	Notes      []string
	Violations []string
}

// ruleCheck is the state of the checks of one rule.
type ruleCheck struct {
	rep   *Report
	rr    *RuleReport
	c     *rules.Compiled
	fm    *formats
	stage *pipeline.Stage // validates and runs the records of in
	// srcStage validates the source's records (with the record-key check);
	// stage itself for a rule that reads its source in place.
	srcStage *pipeline.Stage
	// dlqRules is the dlq.rules value of the letters of the source's
	// records on the rule's dead-letter topic (pipeline.DeadLetterRules),
	// as the processor of this configuration writes them.
	dlqRules []byte
	filter   *rules.Filter
	thr      *rules.Threshold
	repart   bool
	src, in  *topicData
	// base is the last accounting record committed before From, top the
	// last committed before To, per partition of in.
	base, top map[int32]pipeline.Accounting
	// srcCommitted is the checked range of the source's records: the
	// rule's own for an in-place rule; for a repartitioned rule that of an
	// in-place rule of the same source (nil when there is none).
	srcCommitted func(int32, int64) bool
	// evidence found through the source because the repartition record
	// was purged, and checked in the repartition topic.
	viaSource, inRepartition int
	// deleted counts the dead letters and too-late copies that name an
	// input record below its partition's log start (deleted by
	// retention): nothing is left to compare them with.
	deleted int
	// deletedEvidence counts the evidence samples that name such a record.
	deletedEvidence int
	// group is the changelog positions of the group's committed offsets
	// (groupPositions).
	group map[string]map[int32]map[string]int64
}

// violationsCap bounds each list of violations.
const violationsCap = 50

// violate records a violation of the rule, in its section and, named, in
// the report's list.
func (rc *ruleCheck) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	switch n := len(rc.rr.Violations); {
	case n < violationsCap:
		rc.rr.Violations = append(rc.rr.Violations, msg)
	case n == violationsCap:
		rc.rr.Violations = append(rc.rr.Violations, "(more violations not shown)")
	}
	rc.rep.violate("rule %s v%d: %s", rc.c.Rule.ID, rc.c.Rule.Version, msg)
}

func (rc *ruleCheck) note(format string, args ...any) {
	rc.rr.Notes = append(rc.rr.Notes, fmt.Sprintf(format, args...))
}

// committed reports whether a record of in was counted in the range.
func (rc *ruleCheck) committed(p int32, off int64) bool {
	return off >= rc.base[p].NextOffset && off < rc.top[p].NextOffset
}

// runRules checks every rule of the configuration's rules file.
func runRules(ctx context.Context, o Options) (*Report, error) {
	cfg := o.Config
	if o.Recompute && (!o.From.IsZero() || !o.To.IsZero()) {
		return nil, errors.New("reconcile: --recompute checks the whole log; it takes no time range")
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
	rd := newReader(ctx, o, fm)
	if err := rd.prefetch(cfg, rs); err != nil {
		return nil, err
	}
	checks := make([]*ruleCheck, 0, len(rs))
	for _, c := range rs {
		rc, err := newRuleCheck(rep, rd, cfg, c, rs)
		if err != nil {
			return nil, err
		}
		cl, err := rd.topic(cfg.ChangelogFor(c))
		if err != nil {
			return nil, err
		}
		if o.To.IsZero() { // the group's offsets are now's, not To's
			rc.group = group
		}
		rc.accounting(cl.recs, o.From, o.To)
		checks = append(checks, rc)
	}
	linkSources(checks)
	if err := checkTopics(rep, rd, checks); err != nil {
		return nil, err
	}
	byRule, err := alertsByRule(rep, rd, checks)
	if err != nil {
		return nil, err
	}
	for _, rc := range checks {
		if err := rc.outputs(rd, byRule[ruleKey(rc.c.Rule.ID, rc.c.Rule.Version)], o); err != nil {
			return nil, err
		}
	}
	rep.total(rd, checks)
	return rep, nil
}

// prefetch reads the changelogs, then the output topics, before the
// inputs (newRuleCheck): while the processor runs, whatever a read
// changelog counts, and whatever a read output names, was in its input
// before, so reading in this order never sees a count or a copy of a
// record it has not read.
func (rd *reader) prefetch(cfg config.Config, rs []*rules.Compiled) error {
	var names []string
	for _, c := range rs {
		names = append(names, cfg.ChangelogFor(c))
	}
	for _, c := range rs {
		names = append(names, c.Rule.Outputs.Alerts, c.Rule.Outputs.DLQ, c.Rule.Outputs.Late)
	}
	for _, name := range names {
		if _, err := rd.topic(name); err != nil {
			return err
		}
	}
	return nil
}

// newRuleCheck reads the rule's input and prepares its evaluators; rs are
// all the rules of the file.
func newRuleCheck(rep *Report, rd *reader, cfg config.Config, c *rules.Compiled, rs []*rules.Compiled) (*ruleCheck, error) {
	r := c.Rule
	rc := &ruleCheck{rep: rep, c: c, fm: rd.fm, repart: r.Repartitioned(), filter: c.NewFilter(), thr: c.NewThreshold(),
		base: map[int32]pipeline.Accounting{}, top: map[int32]pipeline.Accounting{}}
	rc.rr = &RuleReport{ID: r.ID, Version: r.Version, Window: r.Window.Type, Source: r.Source, Input: r.Source,
		Repartitioned: rc.repart, AlertsTopic: r.Outputs.Alerts, DLQTopic: r.Outputs.DLQ, LateTopic: r.Outputs.Late,
		Changelog: cfg.ChangelogFor(c), Partitions: rc.top}
	rep.Rules = append(rep.Rules, rc.rr)
	skew := cfg.Rule.MaxFutureSkew.Milliseconds() // one setting for every source, as the processor
	// The source's decoder for both stages: a repartition topic carries
	// the source's values unchanged (as the processor reads them).
	dec := rd.fm.decoder(r.Source)
	rc.dlqRules = pipeline.DeadLetterRules(rs, r.Source, r.Outputs.DLQ)
	var err error
	if rc.srcStage, err = pipeline.NewRuleStage(c, pipeline.Options{MaxFutureSkewMs: skew, Decoder: dec, DeadLetterRules: rc.dlqRules}); err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	rc.stage = rc.srcStage
	if rc.src, err = rd.topic(r.Source); err != nil {
		return nil, err
	}
	rc.in = rc.src
	if rc.repart {
		rc.rr.Input = cfg.RepartitionFor(c)
		if rc.stage, err = pipeline.NewRuleStage(c, pipeline.Options{MaxFutureSkewMs: skew, Repartitioned: true, Decoder: dec}); err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		if rc.in, err = rd.topic(rc.rr.Input); err != nil {
			return nil, err
		}
	}
	for _, rec := range rc.in.recs {
		if !rc.repart || !isMarker(rec) {
			rc.rr.InputRecords++
		}
	}
	return rc, nil
}

// linkSources gives each rule the checked range of its source's records:
// a repartitioned rule's accounting counts its repartition topic, so the
// source's dead letters are checked against an in-place rule of the same
// source, if there is one.
func linkSources(checks []*ruleCheck) {
	for _, rc := range checks {
		if !rc.repart {
			rc.srcCommitted = rc.committed
			continue
		}
		for _, other := range checks {
			if !other.repart && other.c.Rule.Source == rc.c.Rule.Source {
				rc.srcCommitted = other.committed
				break
			}
		}
	}
}

// accounting takes the rule's accounting records from its changelog and
// checks, per partition of its input: balanced, and records = the input
// records in the range.
func (rc *ruleCheck) accounting(changelog []*kgo.Record, from, to time.Time) {
	readAccounting(changelog, from, to, rc.base, rc.top, rc.violate)
	counts := map[int32]int64{}
	uncounted := map[int32]int64{} // records of partitions without accounting
	for _, r := range rc.in.recs {
		switch _, ok := rc.top[r.Partition]; {
		case rc.repart && isMarker(r):
		case !ok:
			uncounted[r.Partition]++
		case rc.committed(r.Partition, r.Offset):
			counts[r.Partition]++
		}
	}
	for _, p := range sortedKeys(rc.top) {
		rc.checkPartition(p, counts[p])
		rc.rr.Checked += int(counts[p])
	}
	// Nothing of such a partition was committed (in the range): there is
	// nothing to check yet, as for records beyond a committed position;
	// unless the group's committed offset says the rule committed state
	// there, and the changelog lost its accounting.
	ns := fmt.Sprintf("%s.v%d", rc.c.Rule.ID, rc.c.Rule.Version)
	for _, p := range sortedKeys(uncounted) {
		if claimsState(rc.group, rc.in.name, p, ns) {
			rc.violate("partition %d of %s: the group's committed offset carries a changelog position of this rule, but its changelog holds no accounting record for the partition (%d records)", p, rc.in.name, uncounted[p])
			continue
		}
		rc.note("partition %d of %s: %d records, no accounting record committed (in the range): not checked", p, rc.in.name, uncounted[p])
	}
}

// checkPartition checks one partition's accounting against the n records
// of the input found in its range. Records deleted below the log start (a
// repartition topic's consumed records, which the processor purges) are
// not there to count: their number is then bounded by the offsets
// deleted, not known.
func (rc *ruleCheck) checkPartition(p int32, n int64) {
	top, base := rc.top[p], rc.base[p]
	a := delta(top, base)
	if !top.Balanced() || !a.Balanced() {
		rc.violate("partition %d: accounting does not balance: records %d != processed %d + filtered %d + duplicate %d + dead_lettered %d + too_late %d",
			p, a.Records, a.Processed, a.Filtered, a.Duplicate, a.DeadLettered, a.TooLate)
	}
	gone := rc.in.purgedIn(p, base.NextOffset, top.NextOffset)
	switch {
	case gone == 0 && a.Records != n:
		rc.violate("partition %d: %d records counted, but %s holds %d records in offsets [%d, %d)", p, a.Records, rc.in.name, n, base.NextOffset, top.NextOffset)
	case gone > 0 && (a.Records < n || a.Records > n+gone):
		rc.violate("partition %d: %d records counted, but %s holds %d records in offsets [%d, %d) and at most %d more were deleted", p, a.Records, rc.in.name, n, base.NextOffset, top.NextOffset, gone)
	case gone > 0:
		rc.note("partition %d: offsets [%d, %d) of %s were deleted (retention, or the processor's purge of consumed repartition records): its record count is bounded, not exact", p, base.NextOffset, base.NextOffset+gone, rc.in.name)
	}
}

// outputs runs the checks of the rule's outputs: dead letters, too-late
// copies, alerts, and the recomputation.
func (rc *ruleCheck) outputs(rd *reader, mine []alertRec, o Options) error {
	r := rc.c.Rule
	dlq, err := rd.topic(r.Outputs.DLQ)
	if err != nil {
		return err
	}
	late, err := rd.topic(r.Outputs.Late)
	if err != nil {
		return err
	}
	rc.deadLetters(dlq)
	rc.tooLate(late)
	if rc.deleted > 0 {
		rc.note("%d dead letters and too-late copies name input records below the log start of %s (deleted by retention): not checked", rc.deleted, rc.in.name)
	}
	inRange := mine[:0:0]
	for _, a := range mine {
		if (o.From.IsZero() || !a.rec.Timestamp.Before(o.From)) && (o.To.IsZero() || a.rec.Timestamp.Before(o.To)) {
			inRange = append(inRange, a)
		}
	}
	rc.alerts(inRange, !o.From.IsZero())
	if rc.deletedEvidence > 0 {
		rc.note("evidence: %d samples name input records below the log start of %s (deleted by retention): not checked", rc.deletedEvidence, rc.in.name)
	}
	if rc.viaSource > 0 {
		rc.note("evidence: %d samples checked in %s, %d through the source (their repartition records were purged: matched by event id, key, fields and filter, not by position)",
			rc.inRepartition, rc.in.name, rc.viaSource)
	}
	if o.Recompute {
		rc.recompute(mine, late, dlq)
	}
	return nil
}

// recompute reruns an in-place rule over the committed input prefix of its
// source and compares its alerts, its too-late copies, the dead letters of
// its source on its dead-letter topic and its accounting with the
// reference. A repartitioned rule is not recomputed: its revision timing
// depends on how the source partitions interleaved in its repartition
// topic (docs/RULES.md), which a recomputation cannot know once the
// consumed records were purged.
func (rc *ruleCheck) recompute(mine []alertRec, late, dlq *topicData) {
	if rc.repart {
		rc.note("recompute: skipped: a repartitioned rule's revision timing depends on how the source partitions interleaved in %s (docs/RULES.md); the other checks apply", rc.in.name)
		return
	}
	rc.rr.Recomputed = true
	log := pipeline.Log{}
	for _, r := range rc.src.recs {
		if rc.committed(r.Partition, r.Offset) {
			log[r.Partition] = append(log[r.Partition], toInput(r))
		}
	}
	want, accts := rc.stage.Reference(log)
	got := pipeline.Outputs{}
	for _, a := range mine {
		got.Add(pipeline.Alert, a.rec.Key, rc.fm.comparable(a.rec.Value, &a.a), headersOf(a.rec))
	}
	for _, r := range late.recs {
		if rc.isMyLateCopy(r) {
			got.Add(pipeline.TooLate, r.Key, r.Value, headersOf(r))
		}
	}
	// The source's letters of this rule version (and of older processors:
	// letterOwner), with the rules the letter names as this configuration
	// names them (letterAsReference).
	for _, r := range dlq.recs {
		if topic, _, ok := copySource(r, false); ok && topic == rc.src.name && ownerOf(r, rc.c.Rule.ID, rc.c.Rule.Version).counts() {
			key, value, hs := letterAsReference(r, rc.dlqRules, func(at pos) *kgo.Record { return rc.src.byPos[at] },
				func(o *kgo.Record) *event.Error { return rc.src.validate(rc.srcStage, o).err })
			got.Add(pipeline.DeadLetter, key, value, hs)
		}
	}
	if d := pipeline.Diff(want, got.Canonical()); d != "" {
		rc.violate("committed outputs differ from a recomputation over the committed input:\n%s", d)
	}
	for _, p := range sortedKeys(accts) {
		if a := accts[p]; a != rc.top[p] {
			rc.violate("partition %d: accounting %+v, the recomputation counts %+v", p, rc.top[p], a)
		}
	}
}

// total fills the report's totals: distinct topics counted once.
func (rep *Report) total(rd *reader, checks []*ruleCheck) {
	sources := map[string]bool{}
	for _, rc := range checks {
		if !sources[rc.src.name] {
			sources[rc.src.name] = true
			rep.InputRecords += len(rc.src.recs)
		}
		rep.Alerts += rc.rr.Alerts
		rep.AlertIDs += rc.rr.AlertIDs
		rep.TooLate += rc.rr.TooLate
		rep.Recomputed = rep.Recomputed || rc.rr.Recomputed
	}
	// Dead letters: one per input record per distinct topic.
	seen := map[string]bool{}
	for _, rc := range checks {
		if t := rc.c.Rule.Outputs.DLQ; !seen[t] {
			seen[t] = true
			rep.DeadLetters += len(rd.cache[t].recs)
		}
	}
}

// rulesString renders the report of a rules file: one section per rule,
// then the verdict.
func (r *Report) rulesString() string {
	var b strings.Builder
	for _, rr := range r.Rules {
		rr.write(&b)
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if r.OK() {
		fmt.Fprintf(&b, "OK: no violation (%d rules)\n", len(r.Rules))
	} else {
		fmt.Fprintf(&b, "VIOLATIONS (%d):\n", len(r.Violations))
		for _, v := range r.Violations {
			b.WriteString("  - " + indent(v) + "\n")
		}
	}
	return b.String()
}

func (rr *RuleReport) write(b *strings.Builder) {
	fmt.Fprintf(b, "rule %s v%d (%s, source %s", rr.ID, rr.Version, rr.Window, rr.Source)
	if rr.Repartitioned {
		fmt.Fprintf(b, ", repartitioned through %s", rr.Input)
	}
	b.WriteString("):\n")
	if rr.Repartitioned {
		fmt.Fprintf(b, "  repartition records: %d read (those below the log start were purged), %d in the checked range\n", rr.InputRecords, rr.Checked)
	} else {
		fmt.Fprintf(b, "  input records: %d (%d in the checked range)\n", rr.InputRecords, rr.Checked)
	}
	fmt.Fprintf(b, "  alert revisions: %d (%d alerts) on %s\n", rr.Alerts, rr.AlertIDs, rr.AlertsTopic)
	fmt.Fprintf(b, "  dead letters: %d on %s\n  too late: %d on %s\n", rr.DeadLetters, rr.DLQTopic, rr.TooLate, rr.LateTopic)
	for _, p := range sortedKeys(rr.Partitions) {
		a := rr.Partitions[p]
		fmt.Fprintf(b, "  partition %d: next_offset %d records %d = processed %d + filtered %d + duplicate %d + dead_lettered %d + too_late %d\n",
			p, a.NextOffset, a.Records, a.Processed, a.Filtered, a.Duplicate, a.DeadLettered, a.TooLate)
	}
	if rr.Recomputed {
		b.WriteString("  recomputed: outputs and accounting compared with the reference\n")
	}
	for _, n := range rr.Notes {
		b.WriteString("  note: " + n + "\n")
	}
	if len(rr.Violations) == 0 {
		b.WriteString("  OK\n")
		return
	}
	fmt.Fprintf(b, "  VIOLATIONS (%d):\n", len(rr.Violations))
	for _, v := range rr.Violations {
		b.WriteString("    - " + indent(v) + "\n")
	}
}

// indent keeps a multi-line violation (a diff) inside its list item.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n      ") }

// qualifies evaluates the rule's filter on an event, as the pipeline does.
func (rc *ruleCheck) qualifies(ev *event.Event) bool {
	env := rules.Event{
		EventID: ev.EventID, MachineID: ev.MachineID, SensorID: ev.SensorID, TS: ev.TS, Seq: ev.Seq,
		Value: ev.Value, Unit: ev.Unit, Quality: ev.Quality, Clock: ev.Clock, SchemaVersion: int64(ev.SchemaVersion),
	}
	ok, err := rc.filter.Match(&env)
	return ok && err == nil
}
