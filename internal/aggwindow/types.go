package aggwindow

import "strconv"

// Event is a decoded, validated, normalised and deduplicated input record.
type Event struct {
	Key       string  // the rule's key (for example machine_id)
	EventID   string  // unique per physical sample
	SensorID  string  //
	TS        int64   // event time, ms since the Unix epoch; MinTS..MaxTS
	Value     float64 // the aggregated field after normalisation; finite
	Partition int32   // input partition of the record
	Offset    int64   // input offset of the record
	// Ref, if set, caches Key's state in this Partition for a caller that
	// looks the key up once for several rules (package consume: one
	// KeyRef per rule and key). It changes no result.
	Ref *KeyRef
}

// KeyRef is a cached lookup of one key's state in one Partition; the zero
// KeyRef is empty. A KeyRef must be used with one Partition and one key
// only.
type KeyRef struct{ ks *keyState }

// Outcome is what Process did with a record.
type Outcome uint8

// Outcomes.
const (
	Processed  Outcome = iota + 1 // qualifying, applied to its windows
	Filtered                      // qualifies was false (the filter, or a duplicate): moved the watermark only
	TooLate                       // ts < W - L: no window changed (the record goes to the late output)
	OutOfRange                    // ts outside [MinTS, MaxTS]: nothing changed, not even the watermark
)

// String returns the stable lower-case name.
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Filtered:
		return "filtered"
	case TooLate:
		return "too_late"
	case OutOfRange:
		return "out_of_range"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Status is the status of an alert revision.
type Status uint8

// Statuses.
const (
	Open    Status = iota + 1 // revision 0: the window fired
	Updated                   // the aggregate (sessions: or start) changed, or sessions merged into it
	Merged                    // absorbed into another session (MergedInto); final
	Closed                    // W - L >= end; final
)

// String returns the SPEC's status name.
func (s Status) String() string {
	switch s {
	case Open:
		return "open"
	case Updated:
		return "updated"
	case Merged:
		return "merged"
	case Closed:
		return "closed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Evidence is one applied event, as named in an alert.
type Evidence struct {
	EventID   string
	SensorID  string
	TS        int64
	Value     float64
	Partition int32
	Offset    int64
}

// Revision is one alert revision. Callers own it (Evidence is a fresh
// slice).
type Revision struct {
	AlertID    string
	Revision   int
	Status     Status
	MergedInto string // the survivor's AlertID, only with Merged
	Key        string
	// Start and End bound the window, half-open [Start, End), event time in
	// ms. Sessions: End = last event's ts + gap.
	Start, End int64
	Agg        float64 // the aggregate (count as a float64 for Count)
	Count      int     // events in the window
	// Evidence is up to Config.EvidenceLimit events of the window (see the
	// package doc for which).
	Evidence []Evidence
	// Late is true when the revision was caused by an applied event with
	// ts < W (W before that record). Always false for Closed.
	Late bool
	// Watermark is the partition watermark when emitted: W before the record
	// for Open, Updated and Merged; W after the advance for Closed. May be
	// NoWatermark.
	Watermark int64
}

// Result is what one Process call did.
type Result struct {
	Outcome Outcome
	// Revisions are the revisions the event caused (Open or Updated per
	// window in order of start; for sessions Updated then Merged...),
	// followed by the Closed revisions of the watermark advance.
	Revisions []Revision
	// Watermark is W before this record (for the too-late headers).
	Watermark int64
	// LatenessMs is W - ts when ts < W (whatever the outcome), else 0.
	LatenessMs int64
}
