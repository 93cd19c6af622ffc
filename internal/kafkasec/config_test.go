package kafkasec_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/vibeline/processor/internal/kafkasec"
	"github.com/vibeline/processor/internal/kafkasec/kafkasectest"
)

const secret = "s3cr3t-Pa55word"

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaultIsValidAndPlaintext(t *testing.T) {
	c := kafkasec.Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	tc, err := c.TLS.ClientTLS()
	if err != nil || tc != nil {
		t.Fatalf("default TLS = %v, %v; want nil, nil", tc, err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Fatalf("default warnings: %q", w)
	}
}

func TestValidateNamesKeyValueAndValid(t *testing.T) {
	pki := kafkasectest.NewPKI(t, t.TempDir())
	notPEM := writeFile(t, "not.pem", "hello\n")
	empty := writeFile(t, "empty", "\n")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	scram := func(s kafkasec.SASL) kafkasec.Config {
		if s.Mechanism == "" {
			s.Mechanism = kafkasec.ScramSHA512
		}
		return kafkasec.Config{SASL: s}
	}
	tlsOn := func(t kafkasec.TLS) kafkasec.Config {
		t.Enabled = true
		return kafkasec.Config{TLS: t}
	}
	cases := []struct {
		name string
		c    kafkasec.Config
		want []string
	}{
		{"unknown mechanism", kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "SCRAM-SHA-1", Username: "u", Password: secret}},
			[]string{`kafka.sasl.mechanism = "SCRAM-SHA-1"`, `must be one of "", "SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"`}},
		{"lower-case mechanism", kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "scram-sha-512", Username: "u", Password: secret}},
			[]string{`kafka.sasl.mechanism = "scram-sha-512"`, `"SCRAM-SHA-512"`}},
		{"user without mechanism", kafkasec.Config{SASL: kafkasec.SASL{Username: "u"}},
			[]string{`kafka.sasl.mechanism = ""`, `"SCRAM-SHA-512"`, "kafka.sasl.username"}},
		{"password without mechanism", kafkasec.Config{SASL: kafkasec.SASL{Password: secret}},
			[]string{`kafka.sasl.mechanism = ""`, "kafka.sasl.password"}},
		{"no user", scram(kafkasec.SASL{Password: secret}),
			[]string{`kafka.sasl.username = ""`, "required", `"SCRAM-SHA-512"`}},
		{"no password", scram(kafkasec.SASL{Username: "u"}),
			[]string{`kafka.sasl.password = ""`, "PROCESSOR_KAFKA_SASL_PASSWORD", "kafka.sasl.password_file"}},
		{"password and file", scram(kafkasec.SASL{Username: "u", Password: secret, PasswordFile: writeFile(t, "p", "x\n")}),
			[]string{"kafka.sasl.password_file", "exactly one"}},
		{"missing password file", scram(kafkasec.SASL{Username: "u", PasswordFile: missing}),
			[]string{`kafka.sasl.password_file = "` + missing + `"`, "no such file"}},
		{"empty password file", scram(kafkasec.SASL{Username: "u", PasswordFile: empty}),
			[]string{`kafka.sasl.password_file = "` + empty + `"`, "empty"}},
		{"ca without tls", kafkasec.Config{TLS: kafkasec.TLS{CAFile: pki.CAFile}},
			[]string{`kafka.tls.ca_file = "` + pki.CAFile + `"`, "kafka.tls.enabled = true"}},
		{"skip verify without tls", kafkasec.Config{TLS: kafkasec.TLS{InsecureSkipVerify: true}},
			[]string{"kafka.tls.insecure_skip_verify = true", "kafka.tls.enabled = true"}},
		{"missing ca", tlsOn(kafkasec.TLS{CAFile: missing}),
			[]string{`kafka.tls.ca_file = "` + missing + `"`, "no such file"}},
		{"ca not pem", tlsOn(kafkasec.TLS{CAFile: notPEM}),
			[]string{`kafka.tls.ca_file = "` + notPEM + `"`, "PEM"}},
		{"cert without key", tlsOn(kafkasec.TLS{CertFile: pki.ClientCertFile}),
			[]string{`kafka.tls.key_file = ""`, "both or neither"}},
		{"key without cert", tlsOn(kafkasec.TLS{KeyFile: pki.ClientKeyFile}),
			[]string{`kafka.tls.cert_file = ""`, "both or neither"}},
		{"key of another cert", tlsOn(kafkasec.TLS{CertFile: pki.ClientCertFile, KeyFile: pki.BrokerKeyFile}),
			[]string{`kafka.tls.cert_file = "` + pki.ClientCertFile + `"`, "kafka.tls.key_file", "does not match"}},
		{"key not pem", tlsOn(kafkasec.TLS{CertFile: pki.ClientCertFile, KeyFile: notPEM}),
			[]string{"kafka.tls.cert_file", "PEM"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.c.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q holds the password", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true, CertFile: "x.pem"},
		SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA256},
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 problems (key_file, username, password), got %d:\n%s", len(lines), err)
	}
}

func TestValidConfigs(t *testing.T) {
	pki := kafkasectest.NewPKI(t, t.TempDir())
	for name, c := range map[string]kafkasec.Config{
		"tls with system roots": {TLS: kafkasec.TLS{Enabled: true}},
		"tls with ca":           {TLS: kafkasec.TLS{Enabled: true, CAFile: pki.CAFile, ServerName: "localhost"}},
		"mtls":                  {TLS: kafkasec.TLS{Enabled: true, CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}},
		"scram-512":             {SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: "u", Password: secret}},
		"scram-256 from a file": {SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA256, Username: "u", PasswordFile: writeFile(t, "p", secret)}},
		"plain over tls":        {TLS: kafkasec.TLS{Enabled: true}, SASL: kafkasec.SASL{Mechanism: kafkasec.Plain, Username: "u", Password: secret}},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestClientTLSLoadsPEM(t *testing.T) {
	pki := kafkasectest.NewPKI(t, t.TempDir())
	c := kafkasec.TLS{Enabled: true, CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile, ServerName: "localhost"}
	tc, err := c.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "localhost" || tc.InsecureSkipVerify {
		t.Fatalf("tls config: roots %v, %d certificates, server name %q, skip verify %v",
			tc.RootCAs != nil, len(tc.Certificates), tc.ServerName, tc.InsecureSkipVerify)
	}
	if tc.Certificates[0].Leaf == nil || tc.Certificates[0].Leaf.Subject.CommonName != "processor" {
		t.Fatalf("client certificate not parsed: %+v", tc.Certificates[0].Leaf)
	}
	// The CA file verifies the broker's certificate, the other CA does not.
	broker, err := os.ReadFile(pki.BrokerCertFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsVerify(tc, broker, "127.0.0.1"); err != nil {
		t.Fatalf("broker certificate does not verify against ca_file: %v", err)
	}
	other, err := kafkasec.TLS{Enabled: true, CAFile: pki.OtherCAFile}.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsVerify(other, broker, "127.0.0.1"); err == nil {
		t.Fatal("broker certificate verifies against a CA that did not sign it")
	}
}

func TestPasswordFileTrimsTrailingNewline(t *testing.T) {
	for in, want := range map[string]string{
		secret + "\n":      secret,
		secret + "\r\n":    secret,
		secret:             secret,
		secret + "\n\n":    secret,
		" " + secret + " ": " " + secret + " ", // spaces are part of a password
		"two\nlines\n":     "two\nlines",
	} {
		s := kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: "u", PasswordFile: writeFile(t, "p", in)}
		if err := (kafkasec.Config{SASL: s}).Validate(); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		got, err := s.ResolvePassword()
		if err != nil || got != want {
			t.Errorf("password file %q: got %q, %v; want %q", in, got, err, want)
		}
	}
	s := kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: "u", Password: secret}
	if got, err := s.ResolvePassword(); err != nil || got != secret {
		t.Errorf("password: got %q, %v", got, err)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	c := kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true},
		SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: "processor", Password: secret},
	}
	type outer struct { // as config.Config embeds it
		Name  string
		Kafka kafkasec.Config
	}
	type withPtr struct {
		Kafka *kafkasec.Config
	}
	o := outer{Name: "x", Kafka: c}
	var forms []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T"} {
		forms = append(forms,
			fmt.Sprintf(verb, o), fmt.Sprintf(verb, &o), fmt.Sprintf(verb, c), fmt.Sprintf(verb, c.SASL),
			fmt.Sprintf(verb, c.SASL.Password), fmt.Sprintf(verb, &c))
	}
	// A pointer to a Config inside another value prints as an address with
	// %v. (With a verb that is wrong for a pointer, such as %s, fmt's
	// bad-verb message prints the pointee without calling any method: do not
	// format such values with verbs other than %v.)
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		forms = append(forms, fmt.Sprintf(verb, withPtr{&c}))
	}
	forms = append(forms, fmt.Sprint(c.SASL.Password), fmt.Sprintln(o), c.SASL.Password.String(), c.SASL.Password.GoString())
	for _, v := range []any{o, c, c.SASL, c.SASL.Password, map[string]any{"p": c.SASL.Password}} {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		forms = append(forms, string(j), string(y))
	}
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		l := slog.New(h)
		l.Info("config", "kafka", c, "sasl", c.SASL, "password", c.SASL.Password, "outer", o)
		l.Info("config", slog.Any("kafka", c), slog.Any("password", c.SASL.Password))
	}
	forms = append(forms, logs.String())
	for _, f := range forms {
		if strings.Contains(f, secret) {
			t.Errorf("the password is in %q", f)
		}
	}
	// The redacted forms still say that a password is set.
	if got := fmt.Sprintf("%+v", c.SASL); !strings.Contains(got, "Password:***") {
		t.Errorf("%%+v = %q, want Password:***", got)
	}
	if got, _ := json.Marshal(c.SASL.Password); string(got) != `"***"` {
		t.Errorf("json = %s", got)
	}
	if got := fmt.Sprintf("%+v", kafkasec.SASL{}); !strings.Contains(got, "Password: ") {
		t.Errorf("empty password %%+v = %q", got)
	}
	// The structured log line names what is in use.
	if !strings.Contains(logs.String(), `"sasl":"SCRAM-SHA-512"`) || !strings.Contains(logs.String(), `"sasl_user":"processor"`) {
		t.Errorf("log line does not name the mechanism and user: %s", logs.String())
	}
}

func TestWarnings(t *testing.T) {
	c := kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true, InsecureSkipVerify: true},
		SASL: kafkasec.SASL{Mechanism: kafkasec.Plain, Username: "u", Password: secret},
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "kafka.tls.insecure_skip_verify = true") {
		t.Errorf("warnings = %q", w)
	}
	c.TLS = kafkasec.TLS{}
	w = c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "PLAIN") || !strings.Contains(w[0], "clear text") {
		t.Errorf("warnings = %q", w)
	}
}

// tlsVerify verifies a PEM certificate for host against tc's roots.
func tlsVerify(tc *tls.Config, certPEM []byte, host string) ([][]*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	return cert.Verify(x509.VerifyOptions{Roots: tc.RootCAs, DNSName: host})
}
