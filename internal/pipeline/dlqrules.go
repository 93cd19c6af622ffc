package pipeline

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/vibeline/processor/internal/rules"
)

// HeaderDeadLetterRules names, on a dead letter, the rule versions it is
// the dead letter of: "<id>@<version>,<id>@<version>,...", sorted by id,
// then version (numerically), each once. Rule ids are 1-200 characters of
// [a-zA-Z0-9._-] (internal/rules and internal/config validation), so
// neither '@' nor ',' can occur in one: the value always splits one way.
//
// The rules named are those that read the record's topic and whose
// dead-letter topic is the letter's topic (DeadLetterRules): an in-place
// rule counts the record as dead_lettered in its accounting; a
// repartitioned rule reading the topic through its repartition topic
// never sees the record (it is not forwarded), and the letter is all that
// is left of it for that rule (processor reconcile checks a repartitioned
// rule's source letters too). A record of a repartition topic that fails
// validation is counted by its one rule, which the letter names. Rules of
// the same source with another dead-letter topic get their own letter
// there, naming them.
//
// Letters written before the header existed have none: processor reconcile
// counts them for every rule version of their topic, as it did before.
const HeaderDeadLetterRules = "dlq.rules"

// MaxDeadLetterRulesBytes bounds the dlq.rules value of a dead letter. The
// in-place rules of a source are bounded already by their commit metadata
// (consume.MaxCommitMetadataBytes, 4096 bytes, and each rule's entry there,
// " <id>.v<version>=<19 digits>", is longer than its "<id>@<version>,"
// here); repartitioned rules reading the source are not, so the processor
// refuses, at start-up, rules whose header would exceed this (some 75
// rules with the longest ids, over 800 with ids of 16 characters). A
// letter then always fits MaxDeadLetterBytes: a letter that leaves out its
// value, key and original headers is error.reason, error.detail (a
// sentence quoting at most 64 bytes of the value), the four source.*
// headers (a topic name is at most 249 bytes), this header and dlq.omitted
// and dlq.original_bytes: under 20 KB.
const MaxDeadLetterRulesBytes = 16 << 10

// RuleVersion names one version of a rule.
type RuleVersion struct {
	ID      string
	Version int
}

// String is "<id>@<version>", as in HeaderDeadLetterRules.
func (r RuleVersion) String() string { return r.ID + "@" + strconv.Itoa(r.Version) }

func compareRuleVersions(a, b RuleVersion) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Version, b.Version))
}

// EncodeDeadLetterRules returns the dlq.rules value naming rs: sorted,
// each once, joined by ','. It is never nil (an empty list is "").
func EncodeDeadLetterRules(rs []RuleVersion) []byte {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, compareRuleVersions)
	rs = slices.Compact(rs)
	b := []byte{}
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r.ID...)
		b = append(b, '@')
		b = strconv.AppendInt(b, int64(r.Version), 10)
	}
	return b
}

// ParseDeadLetterRules parses a dlq.rules value: "" is no rule. It accepts
// only what EncodeDeadLetterRules writes (valid ids, versions >= 1 in
// decimal without leading zeros, sorted, each once), so one list has one
// spelling.
func ParseDeadLetterRules(b []byte) ([]RuleVersion, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var out []RuleVersion
	for part := range bytes.SplitSeq(b, []byte{','}) {
		at := bytes.IndexByte(part, '@')
		if at < 0 {
			return nil, fmt.Errorf("pipeline: %s %q: %q is not <rule id>@<version>", HeaderDeadLetterRules, b, part)
		}
		id, ver := part[:at], part[at+1:]
		if !validRuleID(id) {
			return nil, fmt.Errorf("pipeline: %s %q: rule id %q is not 1-200 characters of [a-zA-Z0-9._-]", HeaderDeadLetterRules, b, id)
		}
		v, err := strconv.Atoi(string(ver))
		if err != nil || v < 1 || string(ver) != strconv.Itoa(v) {
			return nil, fmt.Errorf("pipeline: %s %q: version %q of rule %s is not an integer >= 1", HeaderDeadLetterRules, b, ver, id)
		}
		r := RuleVersion{ID: string(id), Version: v}
		if n := len(out); n > 0 && compareRuleVersions(out[n-1], r) >= 0 {
			return nil, fmt.Errorf("pipeline: %s %q: not sorted, or %s named twice", HeaderDeadLetterRules, b, r)
		}
		out = append(out, r)
	}
	return out, nil
}

// validRuleID reports whether id is a valid rule id: 1-200 characters of
// [a-zA-Z0-9._-].
func validRuleID(id []byte) bool {
	if len(id) == 0 || len(id) > 200 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// DeadLetterRules returns the dlq.rules value of the dead letters written to
// dlq of the records of topic (a rule's source topic), given the rules of a
// configuration: the rules whose source is topic, in place or repartitioned,
// and whose dead-letter topic is dlq. (The dead letters of a repartition
// topic's records name its one rule: EncodeDeadLetterRules of it.)
func DeadLetterRules(rs []*rules.Compiled, topic, dlq string) []byte {
	var named []RuleVersion
	for _, c := range rs {
		if c.Rule.Source == topic && c.Rule.Outputs.DLQ == dlq {
			named = append(named, RuleVersion{ID: c.Rule.ID, Version: c.Rule.Version})
		}
	}
	return EncodeDeadLetterRules(named)
}

// DeadLetterRulesHeader returns the processor's dlq.rules value of a dead
// letter's headers: the last dlq.rules header, when it comes after the
// last error.reason (the processor writes it after its error.* headers;
// one that comes before is an original header of the record). ok is false
// for a letter without one (written before the header existed).
func DeadLetterRulesHeader(hs []Header) (value []byte, ok bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		switch hs[i].Key {
		case HeaderDeadLetterRules:
			return hs[i].Value, true
		case HeaderErrorReason:
			return nil, false
		}
	}
	return nil, false
}

// withoutDeadLetterRules returns hs without its dlq.rules headers (hs
// itself when it has none).
func withoutDeadLetterRules(hs []Header) []Header {
	if !slices.ContainsFunc(hs, func(h Header) bool { return h.Key == HeaderDeadLetterRules }) {
		return hs
	}
	return slices.DeleteFunc(slices.Clone(hs), func(h Header) bool { return h.Key == HeaderDeadLetterRules })
}
