package avro

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors. Callers branch on them with errors.Is (or IsTransient).
var (
	// ErrSchemaNotFound: the registry answered that the schema id does not
	// exist (HTTP 404 with error_code 40403), or the local schema has
	// another id. Permanent: a record with such an id is dead-lettered as
	// schema_unknown.
	ErrSchemaNotFound = errors.New("avro: schema not found")
	// ErrRegistryUnavailable: the registry could not give an answer about a
	// schema (connection refused, timeout, HTTP 5xx or 429, an answer that
	// is not the Confluent API's: a wrong URL, a proxy, missing
	// credentials). Transient: nothing may be dead-lettered for it; the
	// caller keeps the records and retries with backoff.
	ErrRegistryUnavailable = errors.New("avro: schema registry unavailable")
	// ErrNotPrepared: Decode met a schema id that was never fetched, that
	// is, the caller decoded a record without a successful Prepare of its
	// value first (a bug in the caller).
	ErrNotPrepared = errors.New("avro: schema id not prepared")
)

// classified is an error with a message of its own that matches its
// class (a sentinel) and its cause with errors.Is and errors.As.
type classified struct {
	msg   string
	class error
	cause error
}

func (e *classified) Error() string   { return e.msg }
func (e *classified) Unwrap() []error { return []error{e.class, e.cause} }

// newClassified returns an error reading "avro: <op>: <what>: <cause>" that
// wraps class and cause.
func newClassified(class error, op, what string, cause error) error {
	msg := "avro: " + op + ": " + what
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &classified{msg: msg, class: class, cause: cause}
}

// IsTransient reports whether err is a registry fault that retrying may
// cure (it wraps ErrRegistryUnavailable).
func IsTransient(err error) bool { return errors.Is(err, ErrRegistryUnavailable) }

// APIError is an answer of the registry with a non-2xx HTTP status. Its
// text is the status and the body's error; the errors wrapping it name
// the request.
type APIError struct {
	// Op is the request: "get schema id 42", "register subject x".
	Op string
	// Status is the HTTP status code.
	Status int
	// Code is the Confluent error_code of the body (40403, 409, 42201, ...);
	// 0 when the body is not a Confluent error.
	Code int
	// Message is the body's message (or the start of a non-Confluent body).
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if e.Code != 0 {
		fmt.Fprintf(&b, " error_code %d", e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// SchemaError says why a schema id cannot be used to read a record. It is
// permanent: schemas are immutable by id. Its text is the dead-letter
// detail, e.g. "schema id 42 not found in the registry".
type SchemaError struct {
	ID uint32
	// Problem completes "schema id N ...".
	Problem string
	// Err is ErrSchemaNotFound for ids the registry does not know, else nil.
	Err error
}

func (e *SchemaError) Error() string { return fmt.Sprintf("schema id %d %s", e.ID, e.Problem) }

func (e *SchemaError) Unwrap() error { return e.Err }

// maxDetail bounds foreign text (registry messages, decoder errors) copied
// into errors that end up in dead-letter headers and logs.
const maxDetail = 256

// clean makes foreign text safe for a dead-letter detail: printable, one
// line, at most maxDetail bytes.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
