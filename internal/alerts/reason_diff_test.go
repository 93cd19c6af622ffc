package alerts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reasonReference is the strings.Builder ReasonSentenceKeyed that Reason
// replaced, with the aggregate named as the processor's stage named it
// (fmt.Sprintf into what): the oracle of Reason.Append.
func reasonReference(r Reason) string {
	what := r.What
	if g := r.Aggregate; g != nil {
		what = fmt.Sprintf("%s (%s %s)", r.What, g.Fn, strconv.FormatFloat(g.Value, 'g', 6, 64))
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(r.Count))
	b.WriteByte(' ')
	b.WriteString(what)
	b.WriteString(" on ")
	b.WriteString(r.Noun)
	b.WriteByte(' ')
	b.WriteString(r.Key)
	b.WriteString(" within ")
	b.WriteString(spanReference(r.End - r.Start))
	b.WriteString(", from ")
	from, to := FormatTime(r.Start), FormatTime(r.End)
	b.WriteString(from)
	b.WriteString(" to ")
	if len(from) == len(timeLayout) && len(to) == len(timeLayout) && from[:11] == to[:11] {
		to = to[11:]
	}
	b.WriteString(to)
	switch r.Status {
	case StatusUpdated:
		b.WriteString(" (revised)")
	case StatusMerged:
		b.WriteString(", merged into alert ")
		b.WriteString(r.MergedInto)
	case StatusClosed:
		b.WriteString(", closed")
	}
	return b.String()
}

// spanReference is the former formatSpan, through time.Duration.
func spanReference(ms int64) string {
	const limit = int64(1<<63-1) / int64(time.Millisecond)
	if ms > limit || ms < -limit {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// randomSpan is a span of every magnitude, often whole seconds or
// minutes, sometimes beyond time.Duration's range.
func randomSpan(rng *rand.Rand) int64 {
	ms := rng.Int64N(1 << rng.IntN(63))
	switch rng.IntN(4) {
	case 0:
		ms -= ms % 1000
	case 1:
		ms -= ms % 60_000
	}
	if rng.IntN(3) == 0 {
		ms = -ms
	}
	return ms
}

func TestAppendSpanMatchesDuration(t *testing.T) {
	check := func(ms int64) {
		t.Helper()
		if got, want := string(appendSpan(nil, ms)), spanReference(ms); got != want {
			t.Fatalf("appendSpan(%d) = %s, want %s", ms, got, want)
		}
	}
	for _, ms := range []int64{0, 1, -1, 999, 1000, 1001, 1010, 1100, 59_999, 60_000, 61_500, 3_599_999, 3_600_000,
		3_600_001, 86_400_000, maxSpanMs, maxSpanMs + 1, -maxSpanMs, -maxSpanMs - 1, math.MaxInt64, math.MinInt64} {
		check(ms)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 200_000 {
		check(randomSpan(rng))
	}
}

// TestReasonMatchesReference compares Reason.String (and so
// ReasonSentenceKeyed) with the former implementation on random parts:
// every status, with and without an aggregate, times in and beyond the
// wire range, on one date and across dates.
func TestReasonMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	statuses := []string{StatusOpen, StatusUpdated, StatusMerged, StatusClosed, "other"}
	for range 100_000 {
		r := Reason{
			Status: statuses[rng.IntN(len(statuses))], Count: rng.IntN(1000) - 10,
			What: randomString(rng), Noun: "machine", Key: randomString(rng), MergedInto: randomString(rng),
		}
		switch rng.IntN(4) {
		case 0:
			r.Start = rng.Int64()
		case 1:
			r.Start = minWireMs + rng.Int64N(maxWireMs-minWireMs+1)
		default:
			r.Start = 1_767_348_000_000 + rng.Int64N(msPerDay)
		}
		r.End = r.Start + randomSpan(rng)
		if rng.IntN(10) == 0 {
			r.End = rng.Int64()
		}
		if rng.IntN(2) == 0 {
			r.Noun = "sensor"
			r.Aggregate = &Aggregate{Fn: "avg", Value: math.Float64frombits(rng.Uint64())}
			if rng.IntN(2) == 0 {
				r.Aggregate.Value = float64(rng.IntN(100_000)) / 1000
			}
		}
		if got, want := r.String(), reasonReference(r); got != want {
			t.Fatalf("Reason%+v\n got %q\nwant %q", r, got, want)
		}
	}
}

func BenchmarkReason(b *testing.B) {
	r := Reason{
		Status: StatusUpdated, Count: 412, What: "readings", Aggregate: &Aggregate{Fn: "max", Value: 13.37},
		Noun: "machine", Key: "M-017", Start: 1_767_348_000_000, End: 1_767_348_600_000,
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.String()
	}
}
