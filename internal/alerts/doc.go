// Package alerts owns the alert model: the Alert revision as written to the
// alerts topic, its deterministic id, its JSON wire format (Encode, Decode),
// and its human renderings (ReasonSentence, Human).
//
// # Invariants
//
//   - ID is a pure function of (rule_id, rule_version, key, event_id of the
//     first evidence event of revision 0); see ID for the exact bytes hashed.
//   - Encode is deterministic: equal Alerts give equal bytes. Decode accepts
//     exactly what Encode writes and Decode(Encode(a)) == a (an empty
//     evidence list decodes as nil).
//   - No field depends on processing time: times are event times and the
//     partition watermark, both derived from the log.
//
// # Must never
//
// This package must not import the window logic, a Kafka client, Pebble or
// Prometheus, and must not read the wall clock. The window package has its
// own revision type; the caller maps it to Alert.
//
// # Alert JSON value (format version 1)
//
// The record key is the rule's key value (machine_id for machine-keyed
// rules), UTF-8. The value is one JSON object on one
// line, members in this order:
//
//	member        type                 meaning
//	alert_id      string (32 hex)      deterministic id, see ID; equal for all revisions of one alert
//	revision      integer >= 0         0, 1, 2, ... per alert_id, in emission order
//	status        string               "open" (revision 0), "updated", "merged" or "closed" (last revision)
//	merged_into   string (32 hex)      present only with status "merged": the surviving alert's alert_id
//	rule_id       string               the rule that fired, e.g. "vibration-high"
//	rule_version  integer              the rule's version
//	machine_id    string               the key of the incident; "" for rules keyed by another field
//	start         time                 event time of the incident's first firing span start
//	end           time                 event time of the incident's largest span end
//	count         integer >= 0         qualifying applied events with ts in [start, end]
//	key_field     string               present only for rules keyed by a field other than machine_id (e.g. "sensor_id")
//	key           string               present exactly with key_field: the key value of the window
//	aggregate     object               present only for aggregating rules (tumbling, hopping, session windows):
//	  fn          string                 count, sum, avg, min or max
//	  value       number                 the window's aggregate (for those rules start/end bound the window, half-open)
//	evidence      array of objects     the samples of the first firing set, sorted by (ts, event_id):
//	  event_id    string                 the input event's event_id
//	  sensor_id   string                 the input event's sensor_id
//	  ts          time                   the input event's ts
//	  value       number                 the input event's value in mm/s, after normalisation
//	  partition   integer                input partition of the record that carried the event
//	  offset      integer                offset of that record in its partition
//	evidence_omitted integer > 0       present only when evidence events were left out so that the value fits the
//	                                   producer's record limit (package pipeline, MaxAlertBytes): evidence then
//	                                   holds the first events of the list and this many more are not named
//	late          boolean              true when this revision was caused by an event behind the watermark
//	watermark     time or null         the partition watermark when the revision was emitted; null when none yet
//	reason        string               one human sentence (see ReasonSentence); for people, not for parsing
//
// A time is RFC 3339 in UTC with exactly millisecond precision, for example
// "2026-01-02T03:04:05.000Z" (FormatTime). A number is written in the
// shortest decimal form that reads back as the same float64 (encoding/json's
// form: 7.62, 25.4, 1e-7, 1e+21). Strings use JSON escapes only where JSON
// requires them (HTML characters such as > are not escaped). Consumers must
// ignore members they do not know: a later format version may add members
// (this package's own Decode is strict on purpose, to catch drift in tests).
//
// Example (status open):
//
//	{"alert_id":"…","revision":0,"status":"open","rule_id":"vibration-high","rule_version":1,
//	 "machine_id":"M-7","start":"2026-01-02T10:00:00.000Z","end":"2026-01-02T10:01:30.000Z",
//	 "count":3,"evidence":[{"event_id":"e-1","sensor_id":"S-1","ts":"2026-01-02T10:00:00.000Z",
//	 "value":7.5,"partition":0,"offset":12}, …],"late":false,
//	 "watermark":"2026-01-02T10:00:45.000Z","reason":"3 high-vibration events …"}
//
// (shown wrapped; the value is one line). testdata/alert_*.json hold the
// exact bytes for each status.
package alerts
