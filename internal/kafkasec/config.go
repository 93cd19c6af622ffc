package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// SASL mechanisms (kafka.sasl.mechanism).
const (
	// MechanismNone: no SASL authentication (the default).
	MechanismNone = ""
	// ScramSHA512 is SCRAM with SHA-512 (RFC 5802, RFC 7677 with SHA-512):
	// the password never crosses the network.
	ScramSHA512 = "SCRAM-SHA-512"
	// ScramSHA256 is SCRAM with SHA-256.
	ScramSHA256 = "SCRAM-SHA-256"
	// Plain is SASL/PLAIN: the password is sent as is; use it only with TLS.
	Plain = "PLAIN"
)

// validMechanisms is the text of the mechanism error.
const validMechanisms = `"", "SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"`

// Config is the kafka: section of the configuration: how every Kafka client
// connects. The zero value (plaintext, no authentication) is the default.
type Config struct {
	// TLS encrypts the connections and authenticates the brokers (and,
	// with a client certificate, this client).
	TLS TLS `mapstructure:"tls"`
	// SASL authenticates this client with a user name and password.
	SASL SASL `mapstructure:"sasl"`
}

// TLS is the kafka.tls section.
type TLS struct {
	// Enabled dials every broker with TLS. Default false. Key
	// kafka.tls.enabled.
	Enabled bool `mapstructure:"enabled"`
	// CAFile is a PEM file of the CA certificates that sign the brokers'
	// certificates; "" trusts the system's roots. Default "". Key
	// kafka.tls.ca_file.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are the PEM client certificate (chain) and its
	// private key, for brokers that require client authentication
	// (ssl.client.auth=required): both or neither. Default "". Keys
	// kafka.tls.cert_file, kafka.tls.key_file.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// ServerName overrides the host name the brokers' certificates are
	// verified against; "" uses the host of each broker address. Default "".
	// Key kafka.tls.server_name.
	ServerName string `mapstructure:"server_name"`
	// InsecureSkipVerify accepts any broker certificate: tests only; it is
	// logged as a warning. Default false. Key kafka.tls.insecure_skip_verify.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
}

// SASL is the kafka.sasl section.
type SASL struct {
	// Mechanism is "" (no SASL, the default), "SCRAM-SHA-512",
	// "SCRAM-SHA-256" or "PLAIN". Key kafka.sasl.mechanism.
	Mechanism string `mapstructure:"mechanism"`
	// Username is the SASL user; required with a mechanism. Default "".
	// Key kafka.sasl.username.
	Username string `mapstructure:"username"`
	// Password is the SASL password; prefer the environment variable
	// PROCESSOR_KAFKA_SASL_PASSWORD or PasswordFile to the file. Never
	// printed or logged. Default "". Key kafka.sasl.password.
	Password Secret `mapstructure:"password"`
	// PasswordFile is a file holding the password (a mounted secret), read
	// at start-up with its trailing newline trimmed. Exactly one of
	// Password and PasswordFile is set with a mechanism. Default "". Key
	// kafka.sasl.password_file.
	PasswordFile string `mapstructure:"password_file"`
}

// Default returns the defaults: plaintext, no authentication.
func Default() Config { return Config{} }

// Validate checks every key and reads every file the configuration names,
// and returns all problems at once (errors.Join), one per line, each naming
// the key, the value and what would be valid. Secrets are never part of a
// message.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, val any, valid string) {
		errs = append(errs, fmt.Errorf("%s = %s is invalid: %s", key, quote(val), valid))
	}
	badErr := func(key, val string, err error) {
		errs = append(errs, fmt.Errorf("%s = %q is invalid: %w", key, val, err))
	}

	t := c.TLS
	if !t.Enabled {
		for _, kv := range [][2]string{
			{"kafka.tls.ca_file", t.CAFile}, {"kafka.tls.cert_file", t.CertFile},
			{"kafka.tls.key_file", t.KeyFile}, {"kafka.tls.server_name", t.ServerName},
		} {
			if kv[1] != "" {
				bad(kv[0], kv[1], "only used with kafka.tls.enabled = true: enable TLS or remove the key")
			}
		}
		if t.InsecureSkipVerify {
			bad("kafka.tls.insecure_skip_verify", true, "only used with kafka.tls.enabled = true: enable TLS or remove the key")
		}
	} else {
		if t.CAFile != "" {
			if _, err := loadCA(t.CAFile); err != nil {
				badErr("kafka.tls.ca_file", t.CAFile, err)
			}
		}
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			bad("kafka.tls.key_file", "", "the PEM private key of kafka.tls.cert_file: set both or neither")
		case t.CertFile == "" && t.KeyFile != "":
			bad("kafka.tls.cert_file", "", "the PEM certificate of kafka.tls.key_file: set both or neither")
		case t.CertFile != "":
			if _, err := loadKeyPair(t.CertFile, t.KeyFile); err != nil {
				badErr("kafka.tls.cert_file", t.CertFile, fmt.Errorf("with kafka.tls.key_file = %q: %w", t.KeyFile, err))
			}
		}
	}

	s := c.SASL
	switch s.Mechanism {
	case MechanismNone:
		if s.Username != "" || s.Password != "" || s.PasswordFile != "" {
			bad("kafka.sasl.mechanism", s.Mechanism, "one of "+validMechanisms[4:]+
				" when kafka.sasl.username, kafka.sasl.password or kafka.sasl.password_file is set")
		}
	case ScramSHA512, ScramSHA256, Plain:
		if s.Username == "" {
			bad("kafka.sasl.username", s.Username, "the SASL user name, required with kafka.sasl.mechanism = "+quote(s.Mechanism))
		}
		switch {
		case s.Password != "" && s.PasswordFile != "":
			bad("kafka.sasl.password_file", s.PasswordFile, "kafka.sasl.password is set too (perhaps by PROCESSOR_KAFKA_SASL_PASSWORD): set exactly one of them")
		case s.Password == "" && s.PasswordFile == "":
			bad("kafka.sasl.password", s.Password, "the SASL password, required with kafka.sasl.mechanism = "+quote(s.Mechanism)+
				" (or PROCESSOR_KAFKA_SASL_PASSWORD, or kafka.sasl.password_file)")
		case s.PasswordFile != "":
			if _, err := readPasswordFile(s.PasswordFile); err != nil {
				badErr("kafka.sasl.password_file", s.PasswordFile, err)
			}
		}
	default:
		bad("kafka.sasl.mechanism", s.Mechanism, "must be one of "+validMechanisms)
	}
	return errors.Join(errs...)
}

// Warnings returns the risky but valid choices, to be logged at start-up.
func (c Config) Warnings() []string {
	var w []string
	if c.TLS.Enabled && c.TLS.InsecureSkipVerify {
		w = append(w, "kafka.tls.insecure_skip_verify = true: broker certificates are not verified, anyone on the path can impersonate the brokers (for tests only)")
	}
	if c.SASL.Mechanism == Plain && !c.TLS.Enabled {
		w = append(w, `kafka.sasl.mechanism = "PLAIN" without kafka.tls.enabled: the password crosses the network in clear text`)
	}
	return w
}

// LogValue implements slog.LogValuer: what is in use, never a secret (the
// password's source is named, not its value).
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Bool("tls", c.TLS.Enabled)}
	if c.TLS.Enabled {
		ca := c.TLS.CAFile
		if ca == "" {
			ca = "system roots"
		}
		attrs = append(attrs, slog.String("tls_ca", ca), slog.Bool("tls_client_cert", c.TLS.CertFile != ""))
		if c.TLS.ServerName != "" {
			attrs = append(attrs, slog.String("tls_server_name", c.TLS.ServerName))
		}
		if c.TLS.InsecureSkipVerify {
			attrs = append(attrs, slog.Bool("tls_insecure_skip_verify", true))
		}
	}
	mech := c.SASL.Mechanism
	if mech == "" {
		mech = "none"
	}
	attrs = append(attrs, slog.String("sasl", mech))
	if c.SASL.Mechanism != "" {
		from := "kafka.sasl.password"
		if c.SASL.PasswordFile != "" {
			from = "kafka.sasl.password_file " + c.SASL.PasswordFile
		}
		attrs = append(attrs, slog.String("sasl_user", c.SASL.Username), slog.String("sasl_password_from", from))
	}
	return slog.GroupValue(attrs...)
}

// ClientTLS returns the TLS configuration of the clients, or nil when TLS is
// off. It reads the CA and client certificate files again (they may have
// been rotated since Validate).
func (t TLS) ClientTLS() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, logged as a warning
	}
	if t.CAFile != "" {
		pool, err := loadCA(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file %q: %w", t.CAFile, err)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := loadKeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file %q, kafka.tls.key_file %q: %w", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ResolvePassword returns the password: kafka.sasl.password, or the
// contents of kafka.sasl.password_file without its trailing newline. The
// only way to the secret; never print what it returns.
func (s SASL) ResolvePassword() (string, error) {
	if s.PasswordFile == "" {
		return s.Password.Reveal(), nil
	}
	p, err := readPasswordFile(s.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("kafka.sasl.password_file %q: %w", s.PasswordFile, err)
	}
	return p, nil
}

// readPasswordFile reads a password file: the contents without trailing
// CR/LF. An empty password is an error. Errors never hold the contents.
func readPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read password file: %w", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", errors.New("the file is empty: it must hold the password (a trailing newline is trimmed)")
	}
	return p, nil
}

// loadCA reads a PEM file of CA certificates.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM CERTIFICATE block in the file: a PEM file of CA certificates is expected")
	}
	return pool, nil
}

// loadKeyPair reads a PEM certificate (chain) and its private key. The
// errors of crypto/tls name what is wrong, never the key.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load client certificate: %w", err)
	}
	return cert, nil
}

func quote(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case Secret:
		return fmt.Sprintf("%q", x) // redacted by Secret.Format
	default:
		return fmt.Sprint(x)
	}
}
