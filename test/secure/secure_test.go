package secure

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkasec"
	"github.com/vibeline/processor/test/e2e/harness"
)

// alertTimeout bounds start-up, group join, processing and the commit of
// the first alert.
const alertTimeout = 60 * time.Second

// failTimeout is the startup_timeout of the runs that must fail, and
// failWithin how soon they must exit: well before the timeout, since a
// refused credential or certificate is not retried (kgosec.Permanent).
const (
	failTimeout = 90 * time.Second
	failWithin  = 25 * time.Second
)

// TestSecureKafka starts one broker with SASL_PLAINTEXT (SCRAM-SHA-512),
// SSL (client certificate required) and SASL_SSL listeners, builds the
// binary meanwhile, and runs every case against it in parallel.
func TestSecureKafka(t *testing.T) {
	binDir := t.TempDir()
	var bin string
	var buildErr error
	built := make(chan struct{})
	go func() {
		defer close(built)
		bin, buildErr = buildBinary(binDir)
	}()
	// Also when the broker does not start: the build must not go on writing
	// into a removed directory.
	t.Cleanup(func() { <-built })
	b := startBroker(t)
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}

	scram := kafkasec.Config{SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: b.user, Password: kafkasec.Secret(b.pass)}}
	mtls := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: b.pki.CAFile,
		CertFile: b.pki.ClientCertFile, KeyFile: b.pki.ClientKeyFile, ServerName: "localhost"}}
	saslSSL := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: b.pki.CAFile}, SASL: scram.SASL}
	scramEnv := []string{
		"PROCESSOR_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"PROCESSOR_KAFKA_SASL_USERNAME=" + b.user,
		"PROCESSOR_KAFKA_SASL_PASSWORD=" + b.pass,
	}

	t.Run("cases", func(t *testing.T) {
		t.Run("scram/password_from_env", func(t *testing.T) {
			t.Parallel()
			env, alerts := runToAlert(t, bin, b, b.sasl, scram, scramEnv)
			otherCommands(t, bin, b, b.sasl, env, alerts)
		})

		t.Run("scram/password_file", func(t *testing.T) {
			t.Parallel()
			passFile := filepath.Join(t.TempDir(), "kafka-password")
			if err := os.WriteFile(passFile, []byte(b.pass+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := writeConfig(t, fmt.Sprintf("kafka:\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: %s\n    password_file: %s\n", b.user, passFile))
			runToAlert(t, bin, b, b.sasl, scram, nil, "--config", cfg)
		})

		t.Run("mtls", func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, fmt.Sprintf("kafka:\n  tls:\n    enabled: true\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n    server_name: localhost\n",
				b.pki.CAFile, b.pki.ClientCertFile, b.pki.ClientKeyFile))
			runToAlert(t, bin, b, b.ssl, mtls, nil, "--config", cfg)
		})

		t.Run("sasl_ssl", func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, fmt.Sprintf("kafka:\n  tls:\n    enabled: true\n    ca_file: %s\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: %s\n",
				b.pki.CAFile, b.user))
			runToAlert(t, bin, b, b.saslSSL, saslSSL, []string{"PROCESSOR_KAFKA_SASL_PASSWORD=" + b.pass}, "--config", cfg)
		})

		t.Run("scram/wrong_password", func(t *testing.T) {
			t.Parallel()
			wrong := randomHex(t, 16)
			out := runToFailure(t, bin, b, b.sasl, []string{
				"PROCESSOR_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
				"PROCESSOR_KAFKA_SASL_USERNAME=" + b.user,
				"PROCESSOR_KAFKA_SASL_PASSWORD=" + wrong,
			})
			mustMention(t, out, "SASL_AUTHENTICATION_FAILED", "SCRAM-SHA-512")
			for _, s := range []string{wrong, b.pass} {
				if strings.Contains(out, s) {
					t.Errorf("a password is in the output:\n%s", out)
				}
			}
		})

		t.Run("mtls/no_client_certificate", func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, fmt.Sprintf("kafka:\n  tls:\n    enabled: true\n    ca_file: %s\n", b.pki.CAFile))
			out := runToFailure(t, bin, b, b.ssl, nil, "--config", cfg)
			mustMention(t, out, "tls")
			if !regexp.MustCompile(`certificate|handshake`).MatchString(out) {
				t.Errorf("the error does not say what TLS failed on:\n%s", out)
			}
		})

		t.Run("tls/untrusted_broker", func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, fmt.Sprintf("kafka:\n  tls:\n    enabled: true\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n",
				b.pki.OtherCAFile, b.pki.ClientCertFile, b.pki.ClientKeyFile))
			out := runToFailure(t, bin, b, b.ssl, nil, "--config", cfg)
			mustMention(t, out, "certificate signed by unknown authority")
		})

		t.Run("config_redacts_password", func(t *testing.T) {
			t.Parallel()
			p := startProc(t, bin, scramEnv, "config")
			if !p.wait(30 * time.Second) {
				t.Fatal("processor config did not exit")
			}
			out := p.output()
			if p.exitCode() != 0 {
				t.Fatalf("processor config: %s\n%s", p.status(), out)
			}
			if strings.Contains(out, b.pass) {
				t.Fatalf("processor config prints the password:\n%s", out)
			}
			mustMention(t, out, "Mechanism:SCRAM-SHA-512", "Username:"+b.user, "Password:***")
		})
	})
}

// runToAlert produces an incident to a fresh input topic through seed as
// client, runs `processor run` against seed with env and args, waits for
// the alert read_committed through seed, stops the processor cleanly, and
// checks that its output names the security in use and holds no password.
// It returns the processor's environment (with env) and its alerts topic.
func runToAlert(t *testing.T, bin string, b *broker, seed string, client kafkasec.Config, env []string, args ...string) ([]string, string) {
	t.Helper()
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.TrimPrefix(t.Name(), "TestSecureKafka/cases/"))
	input := harness.UniqueName("secure-" + name + ".in")
	producer := newClient(t, seed, client, kgo.TransactionalID(harness.UniqueName("secure-"+name+"-producer")))
	produceIncident(t, producer, input)

	denv, alerts := deployment(t, name, seed, input)
	denv = append(denv, env...)
	start := time.Now()
	p := startProc(t, bin, denv, append([]string{"run"}, args...)...)
	a := waitAlert(t, seed, client, alerts, p, alertTimeout)
	t.Logf("alert committed %s after start: %s %s, %d events", time.Since(start).Round(100*time.Millisecond), a.MachineID, a.Status, a.Count)
	var ids []string
	for _, e := range a.Evidence {
		ids = append(ids, e.EventID)
	}
	if a.Status != "open" || a.MachineID != "M-1" || a.Count != 3 || strings.Join(ids, ",") != "e1,e2,e3" {
		t.Errorf("alert = %+v (evidence %v), want an open alert of M-1 with evidence e1,e2,e3", a, ids)
	}
	p.stop(t)

	out := p.output()
	if strings.Contains(out, b.pass) {
		t.Errorf("the password is in the processor's output:\n%s", out)
	}
	want := []string{`"msg":"kafka security"`}
	if client.SASL.Mechanism != "" {
		want = append(want, `"sasl":"SCRAM-SHA-512"`, `"sasl_user":"`+b.user+`"`)
	}
	if client.TLS.Enabled {
		want = append(want, `"tls":true`)
	}
	mustMention(t, out, want...)
	return denv, alerts
}

// otherCommands runs the other commands that talk to Kafka against the
// topics of a finished run, through seed with the run's environment env
// (its PROCESSOR_KAFKA_* settings): reconcile, dlq inspect, dlq replay
// --dry-run, replay --dry-run, loadgen and deliver (to a webhook of the
// test). Each must succeed, and none may print the password.
func otherCommands(t *testing.T, bin string, b *broker, seed string, env []string, alerts string) {
	t.Helper()
	input := envValue(env, "PROCESSOR_TOPICS_INPUT")
	// The run names its changelog: a new rule version needs another one.
	v2 := append(slices.Clone(env), "PROCESSOR_TOPICS_CHANGELOG="+harness.UniqueName("secure-v2.changelog"))
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{env, []string{"reconcile", "--quiet"}},
		{env, []string{"dlq", "inspect"}},
		{env, []string{"dlq", "replay", "--dry-run"}},
		{v2, []string{"replay", "--dry-run", "--rule.version", "2"}},
		{env, []string{"loadgen", "--brokers", seed, "--topic", input, "--count", "10", "--machines", "2", "--clean"}},
	} {
		args := c.args
		p := startProc(t, bin, c.env, args...)
		if !p.wait(60 * time.Second) {
			t.Fatalf("processor %s did not finish within 60s\n%s", strings.Join(args, " "), p.output())
		}
		out := p.output()
		if p.exitCode() != 0 {
			t.Errorf("processor %s: %s\n%s", strings.Join(args, " "), p.status(), out)
		}
		if strings.Contains(out, b.pass) {
			t.Errorf("processor %s prints the password:\n%s", strings.Join(args, " "), out)
		}
	}

	// deliver: the alert arrives at a webhook.
	posted := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case posted <- string(body):
		default:
		}
	}))
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf("brokers: [%s]\ntopics:\n  alerts: %s\ndelivery:\n  group_id: %s\n  sinks:\n    - {type: webhook, name: hook, url: %q}\n",
		seed, alerts, harness.UniqueName("secure-deliver"), srv.URL+"/hook"))
	p := startProc(t, bin, env, "deliver", "--config", cfg)
	select {
	case body := <-posted:
		if !strings.Contains(body, `"machine_id":"M-1"`) {
			t.Errorf("delivered %s, want the alert of M-1", body)
		}
	case <-p.done:
		t.Fatalf("processor deliver exited: %s\n%s", p.status(), p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("processor deliver delivered nothing within 60s\n%s", p.output())
	}
	p.stop(t)
	out := p.output()
	if strings.Contains(out, b.pass) {
		t.Errorf("processor deliver prints the password:\n%s", out)
	}
	mustMention(t, out, `"msg":"kafka security"`, `"sasl":"SCRAM-SHA-512"`)
}

// envValue is the last value of key in env ("KEY=value" entries).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// runToFailure runs `processor run` against seed with env and args and a
// long startup_timeout, expects exit code 1 long before it (the failure is
// not retried), and returns the output.
func runToFailure(t *testing.T, bin string, b *broker, seed string, env []string, args ...string) string {
	t.Helper()
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.TrimPrefix(t.Name(), "TestSecureKafka/cases/"))
	denv, _ := deployment(t, name, seed, harness.UniqueName("secure-"+name+".in"))
	denv = append(denv, "PROCESSOR_STARTUP_TIMEOUT="+failTimeout.String()) // later entries win
	p := startProc(t, bin, append(denv, env...), append([]string{"run"}, args...)...)
	if !p.wait(failWithin) {
		t.Fatalf("the processor still runs %s after start (startup_timeout %s): a refused credential or certificate must fail at once\n%s", failWithin, failTimeout, p.output())
	}
	out := p.output()
	t.Logf("%s; output:\n%s", p.status(), out)
	if p.exitCode() != 1 {
		t.Errorf("exit code %d, want 1\n%s", p.exitCode(), out)
	}
	if strings.Contains(out, b.pass) {
		t.Errorf("the password is in the output:\n%s", out)
	}
	return out
}

func mustMention(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not mention %q:\n%s", w, out)
		}
	}
}
