package window

import "strconv"

// Event is a decoded, validated and normalised input record (SPEC.md
// section 4 step 1 has passed).
type Event struct {
	Key       string  // the rule's key (vibration: machine_id)
	EventID   string  // unique per physical sample; a redelivery repeats it
	SensorID  string  //
	TS        int64   // event time, milliseconds since the Unix epoch
	Value     float64 // after normalisation (vibration: mm/s)
	Partition int32   // input partition of the record
	Offset    int64   // input offset of the record
}

// Outcome is what Process did with a record. Every record that reaches
// Process gets exactly one.
type Outcome uint8

// Outcomes.
const (
	Processed Outcome = iota + 1 // qualifying, new, applied to the window state
	Filtered                     // the rule's filter was false
	Duplicate                    // event_id seen before for the key within the dedup horizon
	TooLate                      // ts < W - L: goes to the late output, no window state change
)

// String returns the stable lower-case name used in metrics and headers.
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Filtered:
		return "filtered"
	case Duplicate:
		return "duplicate"
	case TooLate:
		return "too_late"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Status is the status of an alert revision.
type Status uint8

// Statuses.
const (
	Open    Status = iota + 1 // revision 0 of a new incident
	Updated                   // start or evidence changed, or the incident absorbed others
	Merged                    // chained into another incident (MergedInto); final
	Closed                    // W - L > end + S; final
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

// Evidence is one applied qualifying event, as named in an alert.
type Evidence struct {
	EventID   string
	SensorID  string
	TS        int64
	Value     float64
	Partition int32
	Offset    int64
}

// Revision is one alert revision. Callers own the returned value (Evidence
// is a fresh slice).
type Revision struct {
	AlertID    string
	Revision   int
	Status     Status
	MergedInto string // the survivor's AlertID, only with Merged
	Key        string
	Start, End int64 // event time, ms
	Count      int   // applied qualifying events with ts in [Start, End]
	// Evidence is the N events of the incident's first firing position, in
	// (ts, event_id) order.
	Evidence []Evidence
	// Late is true when the revision was caused by an applied event with
	// ts < W (W before that record). Always false for Closed.
	Late bool
	// Watermark is the partition watermark when emitted: W before the record
	// for Open/Updated/Merged, W after the advance for Closed. May be
	// NoWatermark.
	Watermark int64
}

// Result is what one Process call did.
type Result struct {
	Outcome Outcome
	// Revisions are the step-5 revisions (Open, or Updated, or Updated then
	// Merged...) followed by the step-7 Closed revisions, in emission order.
	Revisions []Revision
	// Watermark is W before this record (for the too-late headers).
	Watermark int64
	// LatenessMs is W - ts when ts < W (whatever the outcome), else 0.
	// Saturates at math.MaxInt64.
	LatenessMs int64
}

// Kinds of the bucket entries of a key's persisted state (encoding.go).
const (
	EventsBucket byte = 'e' // the key's kept events with ts in the bucket
	DedupBucket  byte = 'd' // the key's remembered event ids with ts in the bucket
)

// BucketRef names one bucket entry: the key's events (Kind EventsBucket) or
// remembered ids (Kind DedupBucket) with ts in [Bucket*B, (Bucket+1)*B),
// B the kind's bucket length (Config.EventBucketMs, Config.DedupBucketMs).
type BucketRef struct {
	Kind   byte
	Key    string
	Bucket int64 // floor(ts / B)
}
