package pipeline

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Log is the input of a reference run: each input partition's records in
// offset order.
type Log map[int32][]Input

// Outputs are the records one run produced (or must produce), grouped the
// way Kafka preserves order: per output kind and key, in production order.
// Records without a key are spread over partitions by the producer and
// have no order; Canonical sorts those.
type Outputs map[Kind]map[string][]string

// Add records one output.
func (o Outputs) Add(kind Kind, key, value []byte, headers []Header) {
	if o[kind] == nil {
		o[kind] = map[string][]string{}
	}
	o[kind][string(key)] = append(o[kind][string(key)], Fingerprint(value, headers))
}

// Fingerprint is a record's value and headers as one comparable string.
func Fingerprint(value []byte, headers []Header) string {
	var b strings.Builder
	b.Write(value)
	for _, h := range headers {
		fmt.Fprintf(&b, "\x00%s=%s", h.Key, h.Value)
	}
	return b.String()
}

// Canonical sorts the records of the empty key, whose order Kafka does not keep.
func (o Outputs) Canonical() Outputs {
	for _, byKey := range o {
		if v, ok := byKey[""]; ok {
			sort.Strings(v)
		}
	}
	return o
}

// Count returns the number of records of kind.
func (o Outputs) Count(kind Kind) int {
	n := 0
	for _, v := range o[kind] {
		n += len(v)
	}
	return n
}

// Diff describes the first differences between want and got, or "" when
// they are equal.
func Diff(want, got Outputs) string {
	var out []string
	kinds := map[Kind]string{Alert: "alerts", DeadLetter: "dead letters", TooLate: "too late"}
	for _, k := range []Kind{Alert, DeadLetter, TooLate} {
		keys := map[string]bool{}
		for key := range want[k] {
			keys[key] = true
		}
		for key := range got[k] {
			keys[key] = true
		}
		sorted := make([]string, 0, len(keys))
		for key := range keys {
			sorted = append(sorted, key)
		}
		slices.Sort(sorted)
		for _, key := range sorted {
			w, g := want[k][key], got[k][key]
			if slices.Equal(w, g) {
				continue
			}
			i := 0
			for i < len(w) && i < len(g) && w[i] == g[i] {
				i++
			}
			msg := fmt.Sprintf("%s key %q: want %d records, got %d; first difference at #%d", kinds[k], key, len(w), len(g), i)
			if i < len(w) {
				msg += fmt.Sprintf("\n  want: %.300q", w[i])
			}
			if i < len(g) {
				msg += fmt.Sprintf("\n  got:  %.300q", g[i])
			}
			out = append(out, msg)
			if len(out) >= 5 {
				return strings.Join(out, "\n")
			}
		}
	}
	return strings.Join(out, "\n")
}

// Reference runs the stage over a log in one pass, without Kafka, crashes
// or rebalances: what a correct exactly-once run must have produced. It also
// returns each partition's accounting.
func (s *Stage) Reference(log Log) (Outputs, map[int32]Accounting) {
	out := Outputs{}
	accts := map[int32]Accounting{}
	parts := make([]int32, 0, len(log))
	for p := range log {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		w := s.NewPartition()
		acct := Accounting{Version: 1}
		for _, in := range log[p] {
			s.Process(w, in, &acct, func(o Output) { out.Add(o.Kind, o.Key, o.Value, o.Headers) })
		}
		accts[p] = acct
	}
	return out.Canonical(), accts
}
