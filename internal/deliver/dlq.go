package deliver

import (
	"context"
	"strconv"
)

// Reasons of a delivery dead letter (header delivery.reason).
const (
	// ReasonRejected: the sink answered with a permanent failure (a 4xx
	// other than 408 and 429, an unexpected 1xx/3xx, or the revision could
	// not be expressed for the sink).
	ReasonRejected = "rejected"
	// ReasonRetriesExhausted: transient failures reached retry.max_attempts
	// or retry.max_elapsed while the sink's breaker stayed closed.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUndecodable: the record is not an alert revision (no
	// idempotency key can be derived); no sink was tried.
	ReasonUndecodable = "undecodable"
)

// Delivery DLQ header names.
const (
	HeaderSink              = "delivery.sink"
	HeaderReason            = "delivery.reason"
	HeaderDetail            = "delivery.detail"
	HeaderAttempts          = "delivery.attempts"
	HeaderLastStatus        = "delivery.last_status"
	HeaderDLQIdempotencyKey = "delivery.idempotency_key"
	HeaderSourceTopic       = "source.topic"
	HeaderSourcePart        = "source.partition"
	HeaderSourceOffset      = "source.offset"
	HeaderSourceTS          = "source.timestamp"
	// Of a dead letter too large to be written whole (MaxDeadLetterBytes):
	// what was left out ("value", "value,key" or "value,key,headers", the
	// original headers) and the full letter's size (key, value, headers).
	HeaderOmitted       = "delivery.omitted"
	HeaderOriginalBytes = "delivery.original_bytes"
)

// MaxDeadLetterBytes bounds a delivery dead letter's key, value and
// headers, as the processor bounds its own (990,000 bytes, under the
// producer's 1,000,012-byte batch limit): a revision near that size plus
// the letter's headers would not fit, its produce would fail on every
// retry and the partition would stall. Such a letter is written without its
// value (then key, then original headers) and says so (HeaderOmitted); the
// revision stays in the alerts topic at source.offset.
const MaxDeadLetterBytes = 990_000

// maxDetail bounds the delivery.detail header.
const maxDetail = 512

// DeadLetter is one revision given up for one sink.
type DeadLetter struct {
	Record Record
	Sink   string
	// Reason is ReasonRejected, ReasonRetriesExhausted or ReasonUndecodable.
	Reason string
	// Detail is one human sentence: the last error, the response body start.
	Detail string
	// Attempts is the number of attempts made (0 for undecodable).
	Attempts int
	// LastStatus is the HTTP status of the last attempt, 0 when no response.
	LastStatus int
	// IdempotencyKey is empty for undecodable records.
	IdempotencyKey string
}

// DeadLetterFunc writes one dead letter durably (the delivery DLQ topic);
// nil means written. Lanes retry it until it succeeds or they stop.
type DeadLetterFunc func(ctx context.Context, dl DeadLetter) error

// Fit returns the key, value and headers of the dead letter's record:
// the original key and value with Headers, or, when those exceed
// MaxDeadLetterBytes, without the value (then the key, then the original
// headers), with HeaderOmitted and HeaderOriginalBytes added.
func (dl DeadLetter) Fit() (key, value []byte, hs []Header) {
	key, value, hs = dl.Record.Key, dl.Record.Value, dl.Headers()
	size := len(key) + len(value) + headersBytes(hs)
	if size <= MaxDeadLetterBytes {
		return key, value, hs
	}
	omitted := "value"
	value = nil
	if len(key)+headersBytes(hs) > MaxDeadLetterBytes-100 {
		omitted, key = "value,key", nil
	}
	if headersBytes(hs) > MaxDeadLetterBytes-100 {
		omitted = "value,key,headers"
		own := dl
		own.Record.Headers = nil
		hs = own.Headers()
	}
	hs = append(hs, Header{HeaderOmitted, []byte(omitted)},
		Header{HeaderOriginalBytes, strconv.AppendInt(nil, int64(size), 10)})
	return key, value, hs
}

// headersBytes is about the encoded size of headers in a record: their
// bytes and, per header, its two length varints (at most 10 bytes).
func headersBytes(hs []Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// Headers are the record headers of the dead letter: the original headers,
// then delivery.sink, delivery.reason, delivery.detail, delivery.attempts,
// delivery.last_status, delivery.idempotency_key and the source.topic,
// source.partition, source.offset and source.timestamp (epoch ms) of the
// alerts-topic record. Key and value are the original ones.
func (dl DeadLetter) Headers() []Header {
	detail := dl.Detail
	if len(detail) > maxDetail {
		detail = detail[:maxDetail]
	}
	h := append([]Header(nil), dl.Record.Headers...)
	return append(h,
		Header{HeaderSink, []byte(dl.Sink)},
		Header{HeaderReason, []byte(dl.Reason)},
		Header{HeaderDetail, []byte(detail)},
		Header{HeaderAttempts, []byte(strconv.Itoa(dl.Attempts))},
		Header{HeaderLastStatus, []byte(strconv.Itoa(dl.LastStatus))},
		Header{HeaderDLQIdempotencyKey, []byte(dl.IdempotencyKey)},
		Header{HeaderSourceTopic, []byte(dl.Record.Topic)},
		Header{HeaderSourcePart, []byte(strconv.Itoa(int(dl.Record.Partition)))},
		Header{HeaderSourceOffset, []byte(strconv.FormatInt(dl.Record.Offset, 10))},
		Header{HeaderSourceTS, []byte(strconv.FormatInt(dl.Record.Timestamp.UnixMilli(), 10))},
	)
}
