// Package kgosec turns a kafkasec.Config into franz-go client options: the
// TLS dialer and the SASL mechanism every Kafka client of the processor is
// built with. It is separate from kafkasec so that the configuration
// (embedded in internal/config) does not depend on the Kafka client.
//
// It must never log or return a secret: the password goes from
// kafkasec.SASL.ResolvePassword straight into the mechanism.
package kgosec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/vibeline/processor/internal/kafkasec"
)

// Opts returns the client options of c: kgo.DialTLSConfig when
// kafka.tls.enabled, kgo.SASL with the configured mechanism when
// kafka.sasl.mechanism is set; none for the default (plaintext, no
// authentication). It reads the files c names (CA, client certificate,
// password file). Call it after c.Validate.
func Opts(c kafkasec.Config) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := c.TLS.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("kgosec: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	m, err := Mechanism(c.SASL)
	if err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// Mechanism returns the SASL mechanism of s, or nil when s.Mechanism is "".
func Mechanism(s kafkasec.SASL) (sasl.Mechanism, error) {
	if s.Mechanism == kafkasec.MechanismNone {
		return nil, nil
	}
	pass, err := s.ResolvePassword()
	if err != nil {
		return nil, fmt.Errorf("kgosec: %w", err)
	}
	switch s.Mechanism {
	case kafkasec.ScramSHA512:
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	case kafkasec.ScramSHA256:
		return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
	case kafkasec.Plain:
		return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
	default:
		return nil, fmt.Errorf("kgosec: kafka.sasl.mechanism = %q is invalid: must be one of \"\", %q, %q, %q",
			s.Mechanism, kafkasec.ScramSHA512, kafkasec.ScramSHA256, kafkasec.Plain)
	}
}

// Permanent reports whether err, from a Kafka client built with Opts, is a
// security failure that retrying cannot fix, so that start-up fails at once
// with it instead of retrying until startup_timeout: credentials the broker
// refuses (SASL_AUTHENTICATION_FAILED), a SASL mechanism it does not
// enable, a broker certificate this client does not trust (unknown
// authority, wrong name, expired), or a handshake the broker refuses (a
// missing or untrusted client certificate: "remote error: tls: ..."). A
// broker that is down, restarting or unreachable is not permanent.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState) {
		return true
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return true
	}
	// The alert the broker sent is an unexported type of crypto/tls; its
	// text is stable ("remote error: tls: bad certificate").
	return strings.Contains(err.Error(), "remote error: tls: ")
}
