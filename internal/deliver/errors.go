package deliver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Class is how a sink's answer is treated.
type Class int

const (
	// Accepted: the receiver took the revision (2xx).
	Accepted Class = iota
	// Transient: retrying may help (408, 429, 5xx, timeouts, connection
	// errors). Transient failures count towards the sink's breaker.
	Transient
	// Permanent: retrying cannot help (other 4xx, an unexpected 1xx/3xx, a
	// revision the sink cannot express); the revision is dead-lettered at
	// once for that sink.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Accepted:
		return "accepted"
	case Transient:
		return "transient"
	default:
		return "permanent"
	}
}

// ClassifyStatus classifies an HTTP status code: 2xx accepted; 408, 429 and
// 5xx transient; every other code permanent (other 4xx; 1xx and 3xx, which
// mean a wrong URL: redirects are never followed, so a POST is never turned
// into a GET by a 301/302).
func ClassifyStatus(code int) Class {
	switch {
	case code >= 200 && code < 300:
		return Accepted
	case code == 408 || code == 429 || (code >= 500 && code < 600):
		return Transient
	default:
		return Permanent
	}
}

// ErrPermanent is matched (errors.Is) by every permanent send failure.
var ErrPermanent = errors.New("permanent delivery failure")

// SendError is one failed delivery attempt, as a sink reports it.
type SendError struct {
	// Sink is the sink's name.
	Sink string
	// Status is the HTTP status code; 0 when no response was received
	// (connection refused or reset, timeout, ...).
	Status int
	// Class is Transient or Permanent.
	Class Class
	// RetryAfter is the receiver's Retry-After, 0 when absent; it raises
	// the next backoff (capped at retry.max).
	RetryAfter time.Duration
	// Body is the start of the response body (at most 256 bytes), for the
	// DLQ detail and logs.
	Body string
	// Err is the transport error when Status is 0, else nil.
	Err error
}

func (e *SendError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("deliver: sink %s: %s: %v", e.Sink, e.Class, e.Err)
	}
	if e.Body != "" {
		return fmt.Sprintf("deliver: sink %s: %s: HTTP %d: %s", e.Sink, e.Class, e.Status, e.Body)
	}
	return fmt.Sprintf("deliver: sink %s: %s: HTTP %d", e.Sink, e.Class, e.Status)
}

func (e *SendError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) true for permanent failures.
func (e *SendError) Is(target error) bool { return target == ErrPermanent && e.Class == Permanent }

// IsPermanent reports whether err is a permanent send failure: retrying
// cannot help and the revision goes to the delivery DLQ at once.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// IsTimeout reports whether err is a request that timed out (the sink's
// per-request timeout or a network timeout). Timeouts are transient.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// statusOf is the HTTP status of a send failure, 0 when none.
func statusOf(err error) int {
	var se *SendError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}
