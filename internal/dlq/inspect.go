package dlq

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
)

// Rendering limits of samples, in bytes.
const (
	ValueExcerptBytes  = 200
	KeyExcerptBytes    = 64
	DetailExcerptBytes = 200
)

// noReason names letters without an error.reason header.
const noReason = "(none)"

// noRules names letters without a dlq.rules header (written by a processor
// before it existed) or with an unreadable one.
const noRules = "(none)"

// InspectOptions configure Inspect.
type InspectOptions struct {
	Config config.Config
	// Selection chooses the letters counted and sampled.
	Selection Selection
	// Samples is how many letters per reason to show, the most recently
	// dead-lettered first. Default 0 (none).
	Samples int
	// IdleTimeout fails the read when no record arrives for this long while
	// the end is not reached. Default 30s.
	IdleTimeout time.Duration
	// ExtraKgoOpts are appended to the client options (TLS, SASL).
	ExtraKgoOpts []kgo.Opt
}

func (o *InspectOptions) ensureDefaults() {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	o.Samples = max(o.Samples, 0)
}

// Span is the first and last of a set of times (zero when the set is empty).
type Span struct {
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
}

func (s *Span) add(t time.Time) {
	if s.First.IsZero() || t.Before(s.First) {
		s.First = t
	}
	if s.Last.IsZero() || t.After(s.Last) {
		s.Last = t
	}
}

func (s Span) String() string {
	if s.First.IsZero() {
		return "-"
	}
	return formatTime(s.First) + " .. " + formatTime(s.Last)
}

// Sample is one dead letter rendered for people: printable and bounded.
type Sample struct {
	DLQ          string    `json:"dlq"`    // <dlq topic>/<partition>@<offset>
	Source       string    `json:"source"` // <topic>/<partition>@<offset>, or "unknown"
	SourceTime   time.Time `json:"source_time,omitzero"`
	DeadLettered time.Time `json:"dead_lettered"`
	Key          string    `json:"key"`    // Excerpt of the key, KeyExcerptBytes
	Detail       string    `json:"detail"` // Excerpt of error.detail, DetailExcerptBytes
	Value        string    `json:"value"`  // Excerpt of the value, ValueExcerptBytes
	ValueBytes   int       `json:"value_bytes"`
	ReplayedFrom string    `json:"replayed_from,omitempty"`
	// Rules is the letter's dlq.rules (the rule versions it is the dead
	// letter of), an Excerpt of DetailExcerptBytes; noRules without one.
	Rules string `json:"rules"`
}

// Summary is what Inspect found.
type Summary struct {
	Topic     string `json:"topic"`
	Selection string `json:"selection"`
	// Read counts the committed dead letters read (up to the last stable
	// offsets listed at the start); Selected those the selection chose.
	Read     int `json:"read"`
	Selected int `json:"selected"`
	// ReplayedBefore counts selected letters that are replays which failed
	// again (they carry dlq.replayed).
	ReplayedBefore int `json:"replayed_before"`
	// Omitted counts selected letters written without their value
	// (dlq.omitted: the record was too large); dlq replay skips them.
	Omitted int `json:"omitted"`
	// ByReason counts selected letters by error.reason ("(none)" without).
	ByReason map[string]int `json:"by_reason"`
	// BySource counts selected letters by "<source topic>/<partition>"
	// ("unknown" without source headers).
	BySource map[string]int `json:"by_source_partition"`
	// ByRule counts selected letters by the rule versions their dlq.rules
	// names, "<id>@<version>" (a letter of several rules counts for each;
	// noRules: letters without the header, written by older processors,
	// or with one that does not parse).
	ByRule map[string]int `json:"by_rule_version"`
	// SourceTime spans the original records' timestamps, DeadLettered the
	// dead letters' own.
	SourceTime   Span `json:"source_time"`
	DeadLettered Span `json:"dead_lettered_time"`
	// Samples are at most InspectOptions.Samples letters per reason, the
	// most recently dead-lettered first.
	Samples map[string][]Sample `json:"samples,omitempty"`

	samples map[string][]Letter
}

// Inspect reads the dead-letter topic read_committed, from its start to the
// last stable offsets listed when it starts, and summarises the selected
// letters. It only reads.
func Inspect(ctx context.Context, o InspectOptions) (*Summary, error) {
	o.ensureDefaults()
	if err := o.Selection.Validate(); err != nil {
		return nil, err
	}
	topic := o.Config.Topics.DLQ
	opts := append([]kgo.Opt{kgo.SeedBrokers(o.Config.Brokers...), kgo.ClientID("processor-dlq-inspect")}, o.ExtraKgoOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq: client: %w", err)
	}
	start, end, err := bounds(ctx, kadm.NewClient(cl), topic)
	cl.Close()
	if err != nil {
		return nil, err
	}
	s := &Summary{Topic: topic, Selection: o.Selection.String(), ByReason: map[string]int{}, BySource: map[string]int{},
		ByRule: map[string]int{}, samples: map[string][]Letter{}}
	err = scan(ctx, opts, topic, start, end, o.IdleTimeout, func(r *kgo.Record) {
		s.Read++
		if l := Parse(r); o.Selection.Match(l) {
			s.add(l, o.Samples)
		}
	})
	if err != nil {
		return nil, err
	}
	s.Samples = map[string][]Sample{}
	for reason, ls := range s.samples {
		for _, l := range ls {
			s.Samples[reason] = append(s.Samples[reason], sample(l))
		}
	}
	return s, nil
}

func (s *Summary) add(l Letter, samples int) {
	s.Selected++
	reason := cmp.Or(l.Reason, noReason)
	s.ByReason[reason]++
	src := "unknown"
	if l.SourceOK {
		src = fmt.Sprintf("%s/%d", l.SourceTopic, l.SourcePartition)
	}
	s.BySource[src]++
	rs, err := pipeline.ParseDeadLetterRules([]byte(l.Rules))
	switch {
	case !l.HasRules || err != nil:
		s.ByRule[noRules]++
	case len(rs) == 0:
		s.ByRule["(no rule named)"]++
	}
	for _, r := range rs {
		s.ByRule[r.String()]++
	}
	if l.Replayed() {
		s.ReplayedBefore++
	}
	if l.Omitted != "" {
		s.Omitted++
	}
	s.SourceTime.add(l.Time())
	s.DeadLettered.add(l.Timestamp)
	if samples == 0 {
		return
	}
	// Keep the most recently dead-lettered: by timestamp, then position,
	// descending, so the choice depends only on the log.
	newer := func(a, b Letter) int {
		return cmp.Or(b.Timestamp.Compare(a.Timestamp), cmp.Compare(b.Partition, a.Partition), cmp.Compare(b.Offset, a.Offset))
	}
	ls := s.samples[reason]
	if len(ls) == samples && newer(l, ls[len(ls)-1]) > 0 {
		return
	}
	ls = append(ls, l)
	slices.SortFunc(ls, newer)
	s.samples[reason] = ls[:min(len(ls), samples)]
}

func sample(l Letter) Sample {
	return Sample{
		DLQ: l.Position(), Source: l.Source(), SourceTime: l.SourceTimestamp, DeadLettered: l.Timestamp.UTC(),
		Key: Excerpt(l.Key, KeyExcerptBytes), Detail: Excerpt([]byte(l.Detail), DetailExcerptBytes),
		Value: Excerpt(l.Value, ValueExcerptBytes), ValueBytes: len(l.Value), ReplayedFrom: Excerpt([]byte(l.ReplayedFrom), KeyExcerptBytes),
		Rules: rulesExcerpt(l),
	}
}

// rulesExcerpt renders a letter's dlq.rules: noRules without one.
func rulesExcerpt(l Letter) string {
	if !l.HasRules {
		return noRules
	}
	return Excerpt([]byte(l.Rules), DetailExcerptBytes)
}

// String renders the summary for people.
func (s *Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dead-letter topic %s: %d committed records read, %d selected (%s)\n", s.Topic, s.Read, s.Selected, s.Selection)
	if s.Selected == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "original record time: %s\ndead-lettered:        %s\n", s.SourceTime, s.DeadLettered)
	fmt.Fprintf(&b, "replays that failed again (dlq.replayed): %d\n", s.ReplayedBefore)
	if s.Omitted > 0 {
		fmt.Fprintf(&b, "written without their value (dlq.omitted; dlq replay skips them, re-inject their originals from source.offset): %d\n", s.Omitted)
	}
	b.WriteString("by reason:\n")
	writeCounts(&b, s.ByReason)
	b.WriteString("by source partition:\n")
	writeCounts(&b, s.BySource)
	b.WriteString("by rule version (dlq.rules; (none): written before the header existed):\n")
	writeCounts(&b, s.ByRule)
	if len(s.Samples) > 0 {
		b.WriteString("samples (most recently dead-lettered first):\n")
		for _, reason := range slices.Sorted(maps.Keys(s.Samples)) {
			fmt.Fprintf(&b, "  %s:\n", reason)
			for _, x := range s.Samples[reason] {
				src := x.Source
				if !x.SourceTime.IsZero() {
					src += " " + formatTime(x.SourceTime)
				}
				key := x.Key
				if key == "" {
					key = "(none)"
				}
				fmt.Fprintf(&b, "    %s  from %s  key %s\n", x.DLQ, src, key)
				if x.ReplayedFrom != "" {
					fmt.Fprintf(&b, "      replayed from: %s\n", x.ReplayedFrom)
				}
				fmt.Fprintf(&b, "      rules: %s\n      detail: %s\n      value (%d bytes): %s\n", x.Rules, x.Detail, x.ValueBytes, x.Value)
			}
		}
	}
	return b.String()
}

// writeCounts writes one indented "name count" line per entry, by name.
func writeCounts(b *strings.Builder, m map[string]int) {
	width := 0
	for k := range m {
		width = max(width, len(k))
	}
	for _, k := range slices.SortedFunc(maps.Keys(m), naturalLess) {
		fmt.Fprintf(b, "  %-*s %d\n", width, k, m[k])
	}
}

// naturalLess orders "topic/10" after "topic/9".
func naturalLess(a, b string) int {
	ai, bi := strings.LastIndexByte(a, '/'), strings.LastIndexByte(b, '/')
	if ai >= 0 && bi >= 0 && a[:ai] == b[:bi] && len(a) != len(b) {
		return cmp.Compare(len(a), len(b))
	}
	return cmp.Compare(a, b)
}
