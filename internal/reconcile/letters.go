package reconcile

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
)

// letterOwner is what a dead letter's dlq.rules header
// (pipeline.HeaderDeadLetterRules) says of one rule version.
type letterOwner uint8

const (
	// letterOther: the letter names other rule versions only (an older
	// version's letter after processor replay, or another rule's).
	letterOther letterOwner = iota
	// letterOwn: the letter names the rule version.
	letterOwn
	// letterLegacy: the letter has no dlq.rules header (written by a
	// processor before it existed): it is counted for every rule version
	// whose dead-letter topic holds it, as it was before (after a replay
	// such letters of the replayed range are still reported twice).
	letterLegacy
	// letterBad: the header cannot be parsed (reported once per topic by
	// checkTopics or the rule: block's check).
	letterBad
)

// letterRules returns the rule versions a dead letter's dlq.rules header
// names; legacy reports a letter without one; err an unparsable one.
func letterRules(r *kgo.Record) (named []pipeline.RuleVersion, legacy bool, err error) {
	v, ok := pipeline.DeadLetterRulesHeader(headersOf(r))
	if !ok {
		return nil, true, nil
	}
	named, err = pipeline.ParseDeadLetterRules(v)
	return named, false, err
}

// ownerOf says what the dead letter r is to rule version id@version.
func ownerOf(r *kgo.Record, id string, version int) letterOwner {
	named, legacy, err := letterRules(r)
	switch {
	case legacy:
		return letterLegacy
	case err != nil:
		return letterBad
	case slices.Contains(named, pipeline.RuleVersion{ID: id, Version: version}):
		return letterOwn
	}
	return letterOther
}

// counts reports whether a letter of this owner is checked and counted for
// the rule version: its own, and legacy letters.
func (o letterOwner) counts() bool { return o == letterOwn || o == letterLegacy }

// letterAsReference returns the dead letter r as a recomputation writes it,
// whose dlq.rules value is want (the rules of the configuration that write
// the letter). A letter that names another set of rules (written before a
// rule of its source was added or removed), or none (written before the
// header existed), is rewritten with want when it is otherwise exactly the
// letter the processor writes of its record with the header it carries
// (pipeline.DeadLetterOutput; none: the older format): the recomputation
// then compares its content, not the rules it could not have named. Any
// other letter is returned as it is, and compared as it is.
//
// orig returns the record a letter names (nil when there is none), check
// validates it.
func letterAsReference(r *kgo.Record, want []byte, orig func(pos) *kgo.Record, check func(*kgo.Record) *event.Error) (key, value []byte, hs []pipeline.Header) {
	hs = headersOf(r)
	have, ok := pipeline.DeadLetterRulesHeader(hs)
	if ok && bytes.Equal(have, want) {
		return r.Key, r.Value, hs
	}
	_, at, okS := copySource(r, false)
	if !okS {
		return r.Key, r.Value, hs
	}
	o := orig(at)
	if o == nil {
		return r.Key, r.Value, hs
	}
	verr := check(o)
	if verr == nil {
		return r.Key, r.Value, hs
	}
	var own []byte // nil: the older format, without the header
	if ok {
		own = append([]byte{}, have...)
	}
	in := toInput(o)
	written := pipeline.DeadLetterOutput(in, verr, own)
	if string(written.Key) != string(r.Key) || string(written.Value) != string(r.Value) ||
		pipeline.Fingerprint(nil, written.Headers) != pipeline.Fingerprint(nil, hs) {
		return r.Key, r.Value, hs
	}
	ref := pipeline.DeadLetterOutput(in, verr, want)
	return ref.Key, ref.Value, ref.Headers
}

// lateOwner says what a too-late copy is to rule version id@version: its
// own when its late.rule and late.rule_version name it, another's when
// they name another, legacy without them.
func lateOwner(id string, version int) func(*kgo.Record) letterOwner {
	return func(r *kgo.Record) letterOwner {
		rid, okID := lastHeader(r, pipeline.HeaderLateRule)
		ver, okV := lastHeader(r, pipeline.HeaderLateRuleVersion)
		switch {
		case !okID && !okV:
			return letterLegacy
		case rid == id && ver == strconv.Itoa(version):
			return letterOwn
		}
		return letterOther
	}
}

// copyRules names the rule versions a dead letter or too-late copy is of,
// for notes: its dlq.rules value, or "<late.rule> v<late.rule_version>".
func copyRules(r *kgo.Record) string {
	if v, ok := pipeline.DeadLetterRulesHeader(headersOf(r)); ok {
		return string(v)
	}
	id, _ := lastHeader(r, pipeline.HeaderLateRule)
	ver, _ := lastHeader(r, pipeline.HeaderLateRuleVersion)
	return id + " v" + ver
}
