package dlq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
)

// Headers of a replayed record (see the package documentation).
const (
	HeaderReplayed          = "dlq.replayed"      // "1"
	HeaderReplayedFrom      = "dlq.replayed.from" // <dlq topic>/<partition>@<offset>
	HeaderOriginalTopic     = "dlq.original.topic"
	HeaderOriginalPartition = "dlq.original.partition"
	HeaderOriginalOffset    = "dlq.original.offset"
	HeaderOriginalTimestamp = "dlq.original.timestamp" // epoch milliseconds
)

// originalPrefix starts every dlq.original.* header.
const originalPrefix = "dlq.original."

// processorHeaders are the headers the processor appends to a dead letter,
// in the order it appends them.
var processorHeaders = []string{
	pipeline.HeaderErrorReason,
	pipeline.HeaderErrorDetail,
	pipeline.HeaderDeadLetterRules,
	pipeline.HeaderSourceTopic,
	pipeline.HeaderSourcePartition,
	pipeline.HeaderSourceOffset,
	pipeline.HeaderSourceTimestamp,
	pipeline.HeaderOmitted,
	pipeline.HeaderOriginalBytes,
}

// Letter is one dead letter, decoded.
type Letter struct {
	// Topic, Partition, Offset and Timestamp are the dead letter's own
	// position and record timestamp (when it was dead-lettered).
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time

	Key, Value []byte
	// Headers are the original record's headers: the dead letter's headers
	// without the processor's error.*, dlq.rules and source.* headers (so
	// a replay never carries a stale dlq.rules into a later letter; the
	// processor would replace it anyway).
	Headers []kgo.RecordHeader

	Reason, Detail string // error.reason ("" when missing), error.detail

	// SourceOK reports whether all four source.* headers were present and
	// well-formed; the Source* fields are meaningful only then.
	SourceOK        bool
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	SourceTimestamp time.Time

	// ReplayedFrom is the dlq.replayed.from of a record that was replayed
	// before and failed again; "" otherwise.
	ReplayedFrom string

	// Rules is the processor's dlq.rules header (pipeline.HeaderDeadLetterRules):
	// the rule versions the letter is the dead letter of,
	// "<id>@<version>,..."; "" when the letter has none (written by a
	// processor before the header existed; HasRules false).
	Rules    string
	HasRules bool

	// Omitted is what the processor left out of a letter too large to be
	// written whole (pipeline.HeaderOmitted: "value", ...); "" otherwise.
	// Such a letter cannot be replayed: the original is in the input topic
	// at its source offset.
	Omitted string
}

// afterReasonHeader reports whether name is one of the processor's headers
// that older processors did not write (dlq.rules) or that it adds only to
// a letter it could not write whole (dlq.omitted, dlq.original_bytes): a
// letter without its own may carry an original header of that name, and
// the processor's follow its error.reason.
func afterReasonHeader(name string) bool {
	return name == pipeline.HeaderOmitted || name == pipeline.HeaderOriginalBytes || name == pipeline.HeaderDeadLetterRules
}

// Parse decodes a dead-letter record. It never fails: a record without the
// processor's headers is a letter with an empty Reason and SourceOK false.
func Parse(r *kgo.Record) Letter {
	l := Letter{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	// The processor appends its headers after the original ones; an original
	// header may carry one of the same names, so only the last occurrence of
	// each is the processor's.
	last := map[string]int{}
	for i, h := range r.Headers {
		last[h.Key] = i
	}
	drop := map[int]bool{}
	val := map[string]string{}
	for _, name := range processorHeaders {
		i, ok := last[name]
		if ok && afterReasonHeader(name) && i < last[pipeline.HeaderErrorReason] {
			ok = false // an original header of that name: the processor's come after error.reason
		}
		if ok {
			drop[i] = true
			val[name] = string(r.Headers[i].Value)
		}
	}
	for i, h := range r.Headers {
		if !drop[i] {
			l.Headers = append(l.Headers, h)
		}
		if h.Key == HeaderReplayedFrom {
			l.ReplayedFrom = string(h.Value)
		}
	}
	l.Omitted = val[pipeline.HeaderOmitted]
	l.Rules, l.HasRules = val[pipeline.HeaderDeadLetterRules]
	l.Reason = val[pipeline.HeaderErrorReason]
	l.Detail = val[pipeline.HeaderErrorDetail]
	p, errP := strconv.ParseInt(val[pipeline.HeaderSourcePartition], 10, 32)
	off, errO := strconv.ParseInt(val[pipeline.HeaderSourceOffset], 10, 64)
	ms, errT := strconv.ParseInt(val[pipeline.HeaderSourceTimestamp], 10, 64)
	topic := val[pipeline.HeaderSourceTopic]
	if errP == nil && errO == nil && errT == nil && topic != "" && p >= 0 && off >= 0 {
		l.SourceOK = true
		l.SourceTopic, l.SourcePartition, l.SourceOffset = topic, int32(p), off
		l.SourceTimestamp = time.UnixMilli(ms).UTC()
	}
	return l
}

// Position is "<topic>/<partition>@<offset>" of the dead letter itself.
func (l Letter) Position() string { return fmt.Sprintf("%s/%d@%d", l.Topic, l.Partition, l.Offset) }

// Source is "<topic>/<partition>@<offset>" of the original record, or
// "unknown" without source headers.
func (l Letter) Source() string {
	if !l.SourceOK {
		return "unknown"
	}
	return fmt.Sprintf("%s/%d@%d", l.SourceTopic, l.SourcePartition, l.SourceOffset)
}

// Time is the time selections and spans use: the original record's
// timestamp, or the dead letter's own when the source headers are missing.
func (l Letter) Time() time.Time {
	if l.SourceOK {
		return l.SourceTimestamp
	}
	return l.Timestamp
}

// Replayed reports whether the letter is a replayed record that failed again.
func (l Letter) Replayed() bool { return l.ReplayedFrom != "" }

// ReplayRecord builds the record that re-injects l into topic: the original
// key, value, record timestamp and headers, without an earlier replay's
// dlq.replayed and dlq.replayed.from, with dlq.original.* (kept from an
// earlier replay, else copied from the source headers), then
// dlq.replayed=1 and dlq.replayed.from=<this letter's position>. Partition
// is set to the source partition; the replayer's partitioner falls back to
// the key hash when topic has fewer partitions.
func (l Letter) ReplayRecord(topic string) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(l.Headers)+6)
	hasOriginal := false
	for _, h := range l.Headers {
		switch {
		case h.Key == HeaderReplayed || h.Key == HeaderReplayedFrom:
			continue
		case strings.HasPrefix(h.Key, originalPrefix):
			hasOriginal = true
		}
		hs = append(hs, h)
	}
	if !hasOriginal && l.SourceOK {
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(l.SourceTopic)},
			kgo.RecordHeader{Key: HeaderOriginalPartition, Value: strconv.AppendInt(nil, int64(l.SourcePartition), 10)},
			kgo.RecordHeader{Key: HeaderOriginalOffset, Value: strconv.AppendInt(nil, l.SourceOffset, 10)},
			kgo.RecordHeader{Key: HeaderOriginalTimestamp, Value: strconv.AppendInt(nil, l.SourceTimestamp.UnixMilli(), 10)},
		)
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderReplayed, Value: []byte("1")},
		kgo.RecordHeader{Key: HeaderReplayedFrom, Value: []byte(l.Position())},
	)
	r := &kgo.Record{Topic: topic, Key: l.Key, Value: l.Value, Headers: hs, Partition: -1}
	if l.SourceOK {
		r.Partition = l.SourcePartition
		r.Timestamp = l.SourceTimestamp
	}
	return r
}

// Excerpt renders b for a terminal or a log line: valid UTF-8, printable
// characters only (others escaped as \n, \t, \xNN or \uNNNN), at most limit
// bytes of rendering; a longer value is cut at a character boundary and
// followed by "... (N bytes)", N being len(b).
func Excerpt(b []byte, limit int) string {
	var out strings.Builder
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size <= 1:
			piece = fmt.Sprintf(`\x%02x`, b[i])
		case r == '\\':
			piece = `\\`
		case r == '\n':
			piece = `\n`
		case r == '\r':
			piece = `\r`
		case r == '\t':
			piece = `\t`
		case !unicode.IsPrint(r):
			if r > 0xffff {
				piece = fmt.Sprintf(`\U%08x`, r)
			} else {
				piece = fmt.Sprintf(`\u%04x`, r)
			}
		default:
			piece = string(b[i : i+size])
		}
		if out.Len()+len(piece) > limit {
			fmt.Fprintf(&out, "... (%d bytes)", len(b))
			return out.String()
		}
		out.WriteString(piece)
		i += size
	}
	return out.String()
}
