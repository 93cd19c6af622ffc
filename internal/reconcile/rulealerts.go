package reconcile

import (
	"cmp"
	"fmt"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
)

// alertRec is one decoded alert revision and its record.
type alertRec struct {
	rec *kgo.Record
	a   alerts.Alert
}

// alertsByRule reads each alerts topic once and groups its revisions by
// rule version (ruleKey): an alerts topic may be shared by several rules,
// which their rule_id and rule_version tell apart. An undecodable record
// is a violation of the topic; revisions of rules outside the file (an
// older version's, after a replay) are counted in a note.
func alertsByRule(rep *Report, rd *reader, checks []*ruleCheck) (map[string][]alertRec, error) {
	topics := map[string]bool{}
	for _, rc := range checks {
		topics[rc.c.Rule.Outputs.Alerts] = true
	}
	out := map[string][]alertRec{}
	for _, name := range sortedKeys(topics) {
		t, err := rd.topic(name)
		if err != nil {
			return nil, err
		}
		others := map[string]int{}
		for _, r := range t.recs {
			a, err := rd.fm.decodeAlert(r.Value)
			if err != nil {
				rep.violate("topic %s: alert %d@%d is undecodable: %v", name, r.Partition, r.Offset, err)
				continue
			}
			k := ruleKey(a.RuleID, a.RuleVersion)
			switch owner := ruleByKey(checks, k); {
			case owner == nil:
				others[k]++
			case owner.c.Rule.Outputs.Alerts != name:
				owner.violate("alert %s rev %d is on %s, but the rule's alerts topic is %s", a.AlertID, a.Revision, name, owner.c.Rule.Outputs.Alerts)
			default:
				out[k] = append(out[k], alertRec{rec: r, a: a})
			}
		}
		if len(others) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("topic %s: alert revisions of rules not in the file (not checked): %s", name, countList(others)))
		}
	}
	return out, nil
}

// alerts checks the rule's alert revisions in the range; midway means the
// range starts after the beginning, so an alert's first revision seen may
// be any.
func (rc *ruleCheck) alerts(recs []alertRec, midway bool) {
	rc.rr.Alerts = len(recs)
	states := map[string]*alertState{}
	seen := map[string]bool{}
	cut, omitted := 0, 0 // revisions with evidence left out, and how many events
	for _, ar := range recs {
		a := &ar.a
		id := a.AlertID + "#" + strconv.Itoa(a.Revision)
		if seen[id] {
			rc.violate("alert %s revision %d appears twice", a.AlertID, a.Revision)
			continue
		}
		seen[id] = true
		nextRevision(states, a, midway, rc.merges(), rc.violate)
		key, msg := rc.alertKey(a)
		if msg != "" {
			rc.violate("alert %s rev %d: %s", a.AlertID, a.Revision, msg)
		}
		if string(ar.rec.Key) != key {
			rc.violate("alert %s rev %d: record key %q is not the alert's key %q", a.AlertID, a.Revision, ar.rec.Key, key)
		}
		for _, msg := range []string{rc.shapeProblem(a, key), rc.windowProblem(a)} {
			if msg != "" {
				rc.violate("alert %s rev %d: %s", a.AlertID, a.Revision, msg)
			}
		}
		rc.checkEvidence(a, key)
		if a.EvidenceOmitted > 0 {
			cut++
			omitted += a.EvidenceOmitted
		}
	}
	rc.rr.AlertIDs = len(states)
	if cut > 0 {
		rc.note("%s", omittedNote(cut, omitted))
	}
}

// omittedNote says that revisions whose evidence was cut to fit the
// producer's record limit (evidence_omitted) had only the evidence they
// name checked.
func omittedNote(revisions, events int) string {
	return fmt.Sprintf("%d alert revisions name only the first events of their evidence (evidence_omitted: %d events left out "+
		"so that the values fit the producer's record limit); the events left out are not checked", revisions, events)
}

// merges reports whether the rule's alerts can be merged: sliding
// incidents chain, sessions bridge; tumbling and hopping windows do not.
func (rc *ruleCheck) merges() bool {
	t := rc.c.Rule.Window.Type
	return t == rules.Sliding || t == rules.Session
}

// alertKey returns the alert's key (machine_id, or key for a rule keyed by
// another field: such alerts carry key_field and key and no machine_id),
// and what is wrong with how the alert carries it, if anything.
func (rc *ruleCheck) alertKey(a *alerts.Alert) (string, string) {
	field := rc.c.Rule.Key
	if field == rules.DefaultKey {
		if a.KeyField != "" || a.Key != "" {
			return a.MachineID, fmt.Sprintf("carries key_field %q and key %q, but the rule is keyed by machine_id", a.KeyField, a.Key)
		}
		return a.MachineID, ""
	}
	if a.KeyField != field || a.MachineID != "" {
		return a.Key, fmt.Sprintf("key_field %q and machine_id %q, want key_field %q and no machine_id", a.KeyField, a.MachineID, field)
	}
	return a.Key, ""
}

// shapeProblem checks what a revision carries for its rule: the
// aggregate (aggregating rules only, of the rule's function), the
// deterministic alert id of revision 0 (rule, version, key and the first
// evidence event, or the window start), and, for an open or updated
// revision of an aggregating rule, that the threshold holds.
func (rc *ruleCheck) shapeProblem(a *alerts.Alert, key string) string {
	r := rc.c.Rule
	if r.Window.Type == rules.Sliding {
		switch {
		case a.Aggregate != nil:
			return "a sliding rule's alert carries an aggregate"
		case a.Revision == 0 && len(a.Evidence) > 0 && a.AlertID != alerts.ID(r.ID, r.Version, key, a.Evidence[0].EventID):
			return "the alert id is not that of the rule, the key and the first evidence event"
		}
		return ""
	}
	switch {
	case a.Aggregate == nil || a.Aggregate.Fn != r.Aggregate.Fn:
		return fmt.Sprintf("aggregate %+v, want one of fn %s", a.Aggregate, r.Aggregate.Fn)
	case a.Revision == 0 && a.AlertID != alerts.ID(r.ID, r.Version, key, strconv.FormatInt(a.Start, 10)):
		return "the alert id is not that of the rule, the key and the window start"
	case a.Status == alerts.StatusOpen || a.Status == alerts.StatusUpdated:
		if fires, err := rc.thr.Fires(a.Aggregate.Value, a.Count); err != nil || !fires {
			return fmt.Sprintf("%s with %s %v over %d events, for which the threshold %q does not hold", a.Status, a.Aggregate.Fn, a.Aggregate.Value, a.Count, r.Threshold)
		}
	}
	return ""
}

// windowProblem checks the evidence against the window: a sliding rule
// names exactly its N firing events, in (ts, event_id) order, spanning at
// most the window size, the first at the incident's start; an aggregating
// rule names 1 to EvidenceLimit distinct events, no more than its count,
// each inside the window [start, end) (tumbling and hopping: a window of
// the rule's size, aligned to its advance; session: at least the gap
// long). Events left out to fit the producer's record limit
// (evidence_omitted) count towards those numbers; the checks of the events
// apply to those named.
func (rc *ruleCheck) windowProblem(a *alerts.Alert) string {
	c, ev := rc.c, a.Evidence
	total := len(ev) + a.EvidenceOmitted
	if c.Rule.Window.Type == rules.Sliding {
		switch n := len(ev); {
		case total != c.N:
			return fmt.Sprintf("%s, want %d", samples(a), c.N)
		case n > 0 && ev[n-1].TS-ev[0].TS > c.SizeMs:
			return fmt.Sprintf("evidence spans %dms > window %s", ev[n-1].TS-ev[0].TS, c.Rule.Window.Size)
		case n > 0 && a.Status != alerts.StatusMerged && (ev[0].TS != a.Start || ev[n-1].TS > a.End):
			// The evidence is the incident's first firing set, which starts
			// it (a merged revision's fields are informational).
			return fmt.Sprintf("evidence [%s, %s] is not the first firing set of the incident [%s, %s]",
				alerts.FormatTime(ev[0].TS), alerts.FormatTime(ev[n-1].TS), alerts.FormatTime(a.Start), alerts.FormatTime(a.End))
		}
		for i := 1; i < len(ev); i++ {
			if cmp.Or(cmp.Compare(ev[i-1].TS, ev[i].TS), cmp.Compare(ev[i-1].EventID, ev[i].EventID)) >= 0 {
				return "evidence is not in (ts, event_id) order"
			}
		}
		return ""
	}
	if total < 1 || total > pipeline.EvidenceLimit || total > a.Count {
		return fmt.Sprintf("%s, want 1 to %d and at most the count %d", samples(a), pipeline.EvidenceLimit, a.Count)
	}
	ids := map[string]bool{}
	for _, e := range ev {
		if e.TS < a.Start || e.TS >= a.End {
			return fmt.Sprintf("evidence %s at %s is outside the window [%s, %s)", e.EventID, alerts.FormatTime(e.TS), alerts.FormatTime(a.Start), alerts.FormatTime(a.End))
		}
		if ids[e.EventID] {
			return fmt.Sprintf("evidence %s named twice", e.EventID)
		}
		ids[e.EventID] = true
	}
	switch c.Rule.Window.Type {
	case rules.Tumbling, rules.Hopping:
		step := cmp.Or(c.AdvanceMs, c.SizeMs)
		if a.End-a.Start != c.SizeMs || floorMod(a.Start, step) != 0 {
			return fmt.Sprintf("window [%s, %s) is not a %s window of the rule", alerts.FormatTime(a.Start), alerts.FormatTime(a.End), c.Rule.Window.Type)
		}
	case rules.Session:
		if a.End-a.Start < c.GapMs {
			return fmt.Sprintf("session [%s, %s) is shorter than the gap %s", alerts.FormatTime(a.Start), alerts.FormatTime(a.End), c.Rule.Window.Gap)
		}
	}
	return ""
}

func floorMod(a, m int64) int64 { return ((a % m) + m) % m }

// samples describes how many evidence samples a revision has: "3 evidence
// samples", or "2 evidence samples + 5 omitted".
func samples(a *alerts.Alert) string {
	if a.EvidenceOmitted == 0 {
		return fmt.Sprintf("%d evidence samples", len(a.Evidence))
	}
	return fmt.Sprintf("%d evidence samples + %d omitted", len(a.Evidence), a.EvidenceOmitted)
}

// checkEvidence checks every evidence sample of a revision.
func (rc *ruleCheck) checkEvidence(a *alerts.Alert, key string) {
	for _, e := range a.Evidence {
		if msg := rc.evidenceProblem(e, key); msg != "" {
			rc.violate("alert %s rev %d: evidence %s at %d@%d of %s %s", a.AlertID, a.Revision, e.EventID, e.Partition, e.Offset, rc.in.name, msg)
		}
	}
}

// evidenceProblem says what is wrong with one evidence sample, or "". The
// evidence of a repartitioned rule names its repartition topic's
// positions; once the processor purged a consumed repartition record,
// the sample is looked for in the source by event id instead.
func (rc *ruleCheck) evidenceProblem(e alerts.Evidence, key string) string {
	r, purged := rc.in.lookup(pos{e.Partition, e.Offset})
	switch {
	case purged && rc.repart:
		return rc.evidenceInSource(e, key)
	case purged:
		rc.deletedEvidence++ // deleted by retention: nothing left to compare
		return ""
	case r == nil:
		return "is not in the input"
	}
	if rc.repart {
		rc.inRepartition++
		if msg := rc.forwardProblem(r); msg != "" {
			return msg
		}
	}
	return rc.eventProblem(rc.in.check(rc.stage, r), e, key)
}

// evidenceInSource finds a purged repartition record's event in the
// source: a valid record with the event id that matches the sample.
func (rc *ruleCheck) evidenceInSource(e alerts.Evidence, key string) string {
	first := ""
	for _, r := range rc.src.withEventID(rc.srcStage, e.EventID) {
		msg := rc.eventProblem(rc.src.check(rc.srcStage, r), e, key)
		if msg == "" {
			rc.viaSource++
			return ""
		}
		first = cmp.Or(first, msg)
	}
	if first == "" {
		return fmt.Sprintf("was deleted from the repartition topic, and no valid record of %s has its event id", rc.src.name)
	}
	return "was deleted from the repartition topic, and the records of its event id in " + rc.src.name + ": " + first
}

// forwardProblem checks a repartition record against the source record
// its source.* headers name: it must carry the same value.
func (rc *ruleCheck) forwardProblem(r *kgo.Record) string {
	topic, at, ok := copySource(r, false)
	if !ok || topic != rc.src.name {
		return "was not forwarded with source headers naming " + rc.src.name
	}
	src, gone := rc.src.lookup(at)
	switch {
	case gone:
		return ""
	case src == nil || string(src.Value) != string(r.Value):
		return fmt.Sprintf("names source record %s, which does not carry the same value", at)
	}
	return ""
}

// eventProblem checks a sample against the validated record carrying it:
// the same event, of the alert's key, qualifying under the rule's filter.
func (rc *ruleCheck) eventProblem(d decoded, e alerts.Evidence, key string) string {
	switch {
	case d.err != nil:
		return fmt.Sprintf("is an invalid record (%s)", d.err.Reason)
	case d.ev.EventID != e.EventID || d.ev.TS != e.TS || d.ev.SensorID != e.SensorID || math.Abs(d.ev.Value-e.Value) > 1e-9:
		return "does not match the input record"
	case rc.stage.KeyOf(&d.ev) != key:
		return fmt.Sprintf("is of %s %q, not the alert's", rc.c.Rule.Key, rc.stage.KeyOf(&d.ev))
	case !rc.qualifies(&d.ev):
		return "does not qualify under the rule's filter"
	}
	return ""
}
