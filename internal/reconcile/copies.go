package reconcile

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
)

// deadLetters checks the rule's dead-letter topic. A record that fails
// validation is dead-lettered once per distinct dead-letter topic of the
// rules reading its topic and counted by each of them, so the rule's topic
// must hold each such record of its input exactly once, and as many in its
// checked range as its accounting counts. A repartitioned rule's accounting
// counts its repartition topic (whose records passed validation at the
// source); the source's dead letters also go to its topic, and are checked
// against the source range of an in-place rule of the same source.
//
// Only the letters of this rule version are checked: those whose dlq.rules
// header names it, and those without the header (written by an older
// processor). Letters naming other versions only (an older version's, after
// processor replay) are not the rule's: each version's letters are checked
// on their own.
func (rc *ruleCheck) deadLetters(dlq *topicData) {
	rc.rr.DeadLetters = rc.checkDeadLetters(dlq, rc.in, rc.stage, rc.committed, true)
	if !rc.repart {
		return
	}
	rc.rr.DeadLetters += rc.checkDeadLetters(dlq, rc.src, rc.srcStage, rc.srcCommitted, false)
	if rc.srcCommitted == nil {
		rc.note("dead letters of %s: each checked, but whether every invalid record has one is not (no in-place rule of the source records its committed position)", rc.src.name)
	}
}

// checkDeadLetters checks the dead letters on dlq of the records of in:
// each once, a copy of an existing record that fails validation (st) for
// the reason named; every record of in that fails validation in the range
// committed has one; and, when counted, as many per partition as the
// accounting's dead_lettered. It returns how many it found.
func (rc *ruleCheck) checkDeadLetters(dlq, in *topicData, st *pipeline.Stage, committed func(int32, int64) bool, counted bool) int {
	seen := map[pos]int{}
	per := map[int32]int64{}
	for _, r := range dlq.recs {
		topic, at, ok := copySource(r, false)
		if !ok || topic != in.name || !ownerOf(r, rc.c.Rule.ID, rc.c.Rule.Version).counts() {
			continue // bad headers are reported once per topic (checkTopics); other versions' letters are not this rule's
		}
		if seen[at]++; seen[at] > 1 {
			if seen[at] == 2 {
				rc.violate("%s: the dead letter of %s record %s appears more than once for %s", dlq.name, in.name, at, ruleKey(rc.c.Rule.ID, rc.c.Rule.Version))
			}
			continue
		}
		if msg := rc.deadLetterProblem(r, in, st, at); msg != "" {
			rc.violate("%s: dead letter %d@%d of %s record %s %s", dlq.name, r.Partition, r.Offset, in.name, at, msg)
		}
		if committed != nil && committed(at.p, at.off) {
			per[at.p]++
		}
	}
	if committed != nil {
		rc.missingDeadLetters(dlq, in, st, committed, seen)
	}
	if counted {
		for _, p := range sortedKeys(rc.top) {
			if want := rc.top[p].DeadLettered - rc.base[p].DeadLettered; per[p] != want {
				rc.violate("partition %d: %d dead letters of %s in %s, accounting says %d", p, per[p], in.name, dlq.name, want)
			}
		}
	}
	return len(seen)
}

// deadLetterProblem says what is wrong with one dead letter, or "".
func (rc *ruleCheck) deadLetterProblem(cp *kgo.Record, in *topicData, st *pipeline.Stage, at pos) string {
	orig, purged := in.lookup(at)
	switch {
	case purged && in != rc.src:
		return "" // a consumed repartition record, deleted: nothing left to compare
	case purged:
		rc.deleted++ // deleted by retention: nothing left to compare
		return ""
	case orig == nil:
		return "names a record that does not exist"
	}
	omitted, isOmitted := processorOmitted(cp)
	if !isOmitted && !sameRecord(orig, cp) {
		return "does not carry the original key and value"
	}
	d := in.validate(st, orig)
	reason, _ := lastHeader(cp, pipeline.HeaderErrorReason)
	switch {
	case d.err == nil:
		return "names a record that passes validation"
	case reason != string(d.err.Reason):
		return fmt.Sprintf("has error.reason %q, but the record fails with %q", reason, d.err.Reason)
	}
	if isOmitted {
		// Too large to be written whole: exactly what the processor leaves
		// out, with the dlq.rules value the letter carries (none: written
		// by an older processor).
		var named []byte
		if v, ok := pipeline.DeadLetterRulesHeader(headersOf(cp)); ok {
			named = append([]byte{}, v...)
		}
		want := pipeline.DeadLetterOutput(toInput(orig), d.err, named)
		got, _ := lastHeaderOf(want.Headers, pipeline.HeaderOmitted)
		if got != omitted || string(want.Key) != string(cp.Key) || string(want.Value) != string(cp.Value) {
			return fmt.Sprintf("leaves out %q of the original, but a letter of it leaves out %q", omitted, got)
		}
	}
	return ""
}

// processorOmitted returns the processor's dlq.omitted header of a dead
// letter: the last one, if it comes after the processor's error.reason
// (an original header of that name comes before it).
func processorOmitted(r *kgo.Record) (string, bool) {
	reason, omitted := -1, -1
	for i, h := range r.Headers {
		switch h.Key {
		case pipeline.HeaderErrorReason:
			reason = i
		case pipeline.HeaderOmitted:
			omitted = i
		}
	}
	if omitted < 0 || omitted < reason {
		return "", false
	}
	return string(r.Headers[omitted].Value), true
}

func lastHeaderOf(hs []pipeline.Header, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

// missingDeadLetters reports the records of in, in the checked range, that
// fail validation but have no dead letter on dlq.
func (rc *ruleCheck) missingDeadLetters(dlq, in *topicData, st *pipeline.Stage, committed func(int32, int64) bool, seen map[pos]int) {
	for _, r := range in.recs {
		at := pos{r.Partition, r.Offset}
		if !committed(at.p, at.off) || seen[at] > 0 || isMarker(r) {
			continue
		}
		if d := in.validate(st, r); d.err != nil {
			rc.violate("%s: %s record %s fails validation (%s) but has no dead letter", dlq.name, in.name, at, d.err.Reason)
		}
	}
}

// isMyLateCopy reports whether a too-late copy names this rule.
func (rc *ruleCheck) isMyLateCopy(r *kgo.Record) bool {
	id, okID := lastHeader(r, pipeline.HeaderLateRule)
	ver, okV := lastHeader(r, pipeline.HeaderLateRuleVersion)
	return okID && okV && id == rc.c.Rule.ID && ver == strconv.Itoa(rc.c.Rule.Version)
}

// tooLate checks the rule's too-late copies (late.rule and
// late.rule_version name it; the late topic may be shared): each input
// record at most once, a copy of a valid record that qualifies under the
// rule's filter, and as many per partition in the range as its accounting
// counts.
func (rc *ruleCheck) tooLate(late *topicData) {
	seen := map[pos]int{}
	per := map[int32]int64{}
	for _, r := range late.recs {
		if !rc.isMyLateCopy(r) {
			continue
		}
		topic, at, ok := copySource(r, false)
		if !ok {
			continue // reported once per topic (checkTopics)
		}
		if topic != rc.in.name {
			rc.violate("%s: too-late copy %d@%d names source %s, but the rule reads %s", late.name, r.Partition, r.Offset, topic, rc.in.name)
			continue
		}
		if seen[at]++; seen[at] > 1 {
			if seen[at] == 2 {
				rc.violate("%s: %s record %s has more than one too-late copy", late.name, rc.in.name, at)
			}
			continue
		}
		if msg := rc.lateProblem(r, at); msg != "" {
			rc.violate("%s: too-late copy %d@%d of %s record %s %s", late.name, r.Partition, r.Offset, rc.in.name, at, msg)
		}
		if rc.committed(at.p, at.off) {
			per[at.p]++
		}
	}
	for _, p := range sortedKeys(rc.top) {
		if want := rc.top[p].TooLate - rc.base[p].TooLate; per[p] != want {
			rc.violate("partition %d: %d too-late copies in %s, accounting says %d", p, per[p], late.name, want)
		}
	}
	rc.rr.TooLate = len(seen)
}

// lateProblem says what is wrong with one too-late copy, or "". The copy
// of a repartitioned rule whose repartition record was purged is checked
// against the source record it was forwarded from (named by its first
// source.* headers).
func (rc *ruleCheck) lateProblem(cp *kgo.Record, at pos) string {
	in, st := rc.in, rc.stage
	orig, purged := in.lookup(at)
	switch {
	case purged && rc.repart:
		topic, sat, ok := copySource(cp, true)
		if !ok || topic != rc.src.name {
			return "names a deleted repartition record and no source record"
		}
		if orig = rc.src.byPos[sat]; orig == nil || string(orig.Value) != string(cp.Value) {
			return fmt.Sprintf("names a deleted repartition record whose source record %s is not in %s with the same value", sat, rc.src.name)
		}
		in, st = rc.src, rc.srcStage
	case purged:
		rc.deleted++ // deleted by retention: nothing left to compare
		return ""
	case orig == nil:
		return "names a record that does not exist"
	case !sameRecord(orig, cp):
		return "does not carry the original key and value"
	}
	d := in.check(st, orig)
	switch {
	case d.err != nil:
		return fmt.Sprintf("is of an invalid record (%s)", d.err.Reason)
	case rc.repart && rc.stage.KeyOf(&d.ev) != string(cp.Key):
		return fmt.Sprintf("is keyed %q, but the event's %s is %q", cp.Key, rc.c.Rule.Key, rc.stage.KeyOf(&d.ev))
	case !rc.qualifies(&d.ev):
		return "is of an event that does not qualify under the rule's filter"
	}
	return ""
}

// checkTopics checks what belongs to no single rule: every dead letter and
// too-late copy names its source, every too-late copy names its rule, a
// dead letter's dlq.rules header is well-formed and names rules of the
// letter's topic and source, and copies naming topics or rules outside the
// file are counted in a note (an older rule version's, after a replay).
func checkTopics(rep *Report, rd *reader, checks []*ruleCheck) error {
	dlqs := map[string][]string{} // topic -> the inputs whose dead letters it holds
	lates := map[string]bool{}
	for _, rc := range checks {
		r := rc.c.Rule
		dlqs[r.Outputs.DLQ] = append(dlqs[r.Outputs.DLQ], rc.src.name, rc.in.name)
		lates[r.Outputs.Late] = true
	}
	for _, name := range sortedKeys(dlqs) {
		t, err := rd.topic(name)
		if err != nil {
			return err
		}
		other := 0
		otherRules := map[string]int{}
		for _, r := range t.recs {
			topic, _, ok := copySource(r, false)
			switch {
			case !ok:
				rep.violate("topic %s: dead letter %d@%d has no valid source.topic/partition/offset headers", name, r.Partition, r.Offset)
				continue
			case !slices.Contains(dlqs[name], topic):
				other++
				continue
			}
			named, legacy, err := letterRules(r)
			if err != nil {
				rep.violate("topic %s: dead letter %d@%d: %v", name, r.Partition, r.Offset, err)
				continue
			}
			if legacy {
				continue
			}
			mine := false
			for _, rv := range named {
				owner := ruleByKey(checks, ruleKey(rv.ID, rv.Version))
				switch {
				case owner == nil:
				case owner.c.Rule.Outputs.DLQ != name:
					owner.violate("%s: dead letter %d@%d names the rule, whose dead-letter topic is %s", name, r.Partition, r.Offset, owner.c.Rule.Outputs.DLQ)
				case topic != owner.src.name && topic != owner.in.name:
					owner.violate("%s: dead letter %d@%d of a %s record names the rule, which reads %s", name, r.Partition, r.Offset, topic, owner.in.name)
				default:
					mine = true
				}
			}
			if !mine {
				v, _ := lastHeader(r, pipeline.HeaderDeadLetterRules)
				otherRules[v]++
			}
		}
		if other > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("topic %s: %d dead letters of topics no rule of the file reads (not checked)", name, other))
		}
		if len(otherRules) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("topic %s: dead letters of rule versions not in the file (not checked), by %s: %s", name, pipeline.HeaderDeadLetterRules, countList(otherRules)))
		}
	}
	for _, name := range sortedKeys(lates) {
		if err := checkLateTopic(rep, rd, name, checks); err != nil {
			return err
		}
	}
	return nil
}

// checkLateTopic checks the rule and source headers of every too-late copy
// on a late topic.
func checkLateTopic(rep *Report, rd *reader, name string, checks []*ruleCheck) error {
	t, err := rd.topic(name)
	if err != nil {
		return err
	}
	others := map[string]int{}
	for _, r := range t.recs {
		id, okID := lastHeader(r, pipeline.HeaderLateRule)
		ver, okV := lastHeader(r, pipeline.HeaderLateRuleVersion)
		if _, _, ok := copySource(r, false); !ok || !okID || !okV {
			rep.violate("topic %s: too-late copy %d@%d lacks its late.rule, late.rule_version or source.* headers", name, r.Partition, r.Offset)
			continue
		}
		owner := ruleByKey(checks, id+" v"+ver)
		switch {
		case owner == nil:
			others[id+" v"+ver]++
		case owner.c.Rule.Outputs.Late != name:
			rep.violate("topic %s: too-late copy %d@%d names rule %s v%s, whose late topic is %s", name, r.Partition, r.Offset, id, ver, owner.c.Rule.Outputs.Late)
		}
	}
	if len(others) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("topic %s: too-late copies of rules not in the file (not checked): %s", name, countList(others)))
	}
	return nil
}

// ruleKey names a rule version: "<id> v<version>".
func ruleKey(id string, version int) string { return id + " v" + strconv.Itoa(version) }

func ruleByKey(checks []*ruleCheck, key string) *ruleCheck {
	for _, rc := range checks {
		if ruleKey(rc.c.Rule.ID, rc.c.Rule.Version) == key {
			return rc
		}
	}
	return nil
}

// countList renders counts by name, sorted by name.
func countList(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// sortedKeys returns m's keys in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
