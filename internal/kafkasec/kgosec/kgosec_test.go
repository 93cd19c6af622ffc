package kgosec_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkasec"
	"github.com/vibeline/processor/internal/kafkasec/kafkasectest"
	"github.com/vibeline/processor/internal/kafkasec/kgosec"
)

const password = "kgosec-test-password"

// ping connects to the cluster with c's options and returns the first error.
func ping(t *testing.T, addrs []string, c kafkasec.Config) error {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	opts, err := kgosec.Opts(c)
	if err != nil {
		t.Fatalf("opts: %v", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

func TestDefaultHasNoOptions(t *testing.T) {
	opts, err := kgosec.Opts(kafkasec.Default())
	if err != nil || len(opts) != 0 {
		t.Fatalf("Opts(default) = %d options, %v; want none", len(opts), err)
	}
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{kafkasec.ScramSHA512, kafkasec.ScramSHA256, kafkasec.Plain} {
		t.Run(mech, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "processor", password))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			good := kafkasec.Config{SASL: kafkasec.SASL{Mechanism: mech, Username: "processor", Password: password}}
			if err := ping(t, cluster.ListenAddrs(), good); err != nil {
				t.Fatalf("right password: %v", err)
			}
			fromFile := good
			fromFile.SASL.Password = ""
			fromFile.SASL.PasswordFile = t.TempDir() + "/password"
			if err := os.WriteFile(fromFile.SASL.PasswordFile, []byte(password+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := ping(t, cluster.ListenAddrs(), fromFile); err != nil {
				t.Fatalf("password file with a trailing newline: %v", err)
			}
			bad := good
			bad.SASL.Password = "wrong-password"
			err = ping(t, cluster.ListenAddrs(), bad)
			if err == nil {
				t.Fatal("wrong password: connected")
			}
			if strings.Contains(err.Error(), "wrong-password") {
				t.Fatalf("the error holds the password: %v", err)
			}
			t.Logf("wrong password: %v", err)
		})
	}
}

func TestMutualTLS(t *testing.T) {
	pki := kafkasectest.NewPKI(t, t.TempDir())
	serverCert, err := tls.LoadX509KeyPair(pki.BrokerCertFile, pki.BrokerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		MinVersion:   tls.VersionTLS12,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()

	mtls := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}}
	if err := ping(t, addrs, mtls); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	noCert := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: pki.CAFile}}
	if err := ping(t, addrs, noCert); err == nil {
		t.Fatal("without a client certificate: connected")
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	otherCA := mtls
	otherCA.TLS.CAFile = pki.OtherCAFile
	if err := ping(t, addrs, otherCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("trusting another CA: want a certificate error, got %v", err)
	}
	wrongName := mtls
	wrongName.TLS.ServerName = "kafka.example.com"
	if err := ping(t, addrs, wrongName); err == nil || !strings.Contains(err.Error(), "kafka.example.com") {
		t.Fatalf("server_name not in the certificate: want a host name error, got %v", err)
	}
	skip := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, InsecureSkipVerify: true, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}}
	if err := ping(t, addrs, skip); err != nil {
		t.Fatalf("insecure_skip_verify: %v", err)
	}
}

// TestPermanent: refused credentials and certificates are permanent; a
// broker that is down, slow or still creating a topic is not.
func TestPermanent(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"wrong password", fmt.Errorf("list topics: %w", kerr.SaslAuthenticationFailed), true},
		{"mechanism not enabled", fmt.Errorf("list topics: %w", kerr.UnsupportedSaslMechanism), true},
		{"untrusted broker", fmt.Errorf("unable to dial: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true},
		{"wrong server name", x509.HostnameError{Host: "kafka-1"}, true},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired}, true},
		{"client certificate refused", errors.New("list topics: remote error: tls: bad certificate"), true},
		{"timeout", fmt.Errorf("list topics: %w", context.DeadlineExceeded), false},
		{"refused connection", fmt.Errorf("unable to dial: %w", syscall.ECONNREFUSED), false},
		{"topic being created", fmt.Errorf("describe: %w", kerr.UnknownTopicOrPartition), false},
	} {
		if got := kgosec.Permanent(tt.err); got != tt.want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
