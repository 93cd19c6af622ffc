// Package kgosec turns a kafkasec.Config into franz-go client options: the
// TLS dialer and the SASL mechanism every Kafka client of the processor is
// built with. It is separate from kafkasec so that the configuration
// (embedded in internal/config) does not depend on the Kafka client.
//
// It must never log or return a secret: the password goes from
// kafkasec.SASL.ResolvePassword straight into the mechanism.
package kgosec

import (
	"fmt"

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
