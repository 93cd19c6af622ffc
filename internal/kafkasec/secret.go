package kafkasec

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted is what every textual form of a non-empty Secret shows.
const redacted = "***"

// Secret is a string that never prints: fmt (every verb, %v, %+v, %#v, %s,
// %q, %x, %d ...), encoding/json, YAML encoders, encoding.TextMarshaler users
// and log/slog all see "***" when it is set and "" when it is not, so an
// operator can tell whether a password is configured without seeing it.
// Reveal returns the value.
type Secret string

// Reveal returns the secret itself. Call it only to hand the value to the
// code that authenticates, never to print or log it.
func (s Secret) Reveal() string { return string(s) }

// String returns "***", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString returns the redacted form as a Go string literal (%#v).
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// Format implements fmt.Formatter, so that no verb reaches the value (a
// verb such as %d on a plain string type would print it in the bad-verb
// message).
func (s Secret) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'q', verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, s.GoString())
	default:
		_, _ = io.WriteString(f, s.String())
	}
}

// MarshalText implements encoding.TextMarshaler (used by encoding/json,
// YAML encoders and slog's handlers): the redacted form.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalYAML implements the Marshaler of the gopkg.in/yaml and go.yaml.in
// encoders: the redacted form.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// LogValue implements slog.LogValuer: the redacted form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }
