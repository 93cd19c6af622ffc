// Package kafkasectest makes throw-away TLS material for tests of Kafka
// security: a certificate authority, a broker certificate and a client
// certificate, written as PEM files into a directory the test owns (a
// t.TempDir), never into the repository.
//
// It owns nothing but test fixtures; production code must not import it.
package kafkasectest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a test certificate authority and the certificates it signed, as
// PEM files in Dir.
type PKI struct {
	Dir string
	// CAFile is the CA certificate (ca.pem): the clients' and the broker's
	// trust store.
	CAFile string
	// BrokerFile is the broker's private key (PKCS #8) followed by its
	// certificate (broker.pem): a Kafka PEM key store
	// (ssl.keystore.type=PEM).
	BrokerFile string
	// BrokerCertFile and BrokerKeyFile are the same broker certificate and
	// key in two files (broker-cert.pem, broker-key.pem), for Go servers.
	BrokerCertFile, BrokerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (CN
	// "processor", extended key usage clientAuth) and its key
	// (client-cert.pem, client-key.pem).
	ClientCertFile, ClientKeyFile string
	// OtherCAFile is a second CA that signed nothing here (other-ca.pem):
	// trusting it instead of CAFile must fail verification.
	OtherCAFile string
}

// NewPKI writes a fresh CA, a broker certificate valid for 127.0.0.1, ::1
// and localhost, and a client certificate into dir (created if needed).
// ECDSA P-256 keys; certificates valid from an hour ago for a day. It fails
// the test on any error.
func NewPKI(t testing.TB, dir string) *PKI {
	t.Helper()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatalf("kafkasectest: %v", err)
	}
	return p
}

func newPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		BrokerFile:     filepath.Join(dir, "broker.pem"),
		BrokerCertFile: filepath.Join(dir, "broker-cert.pem"),
		BrokerKeyFile:  filepath.Join(dir, "broker-key.pem"),
		ClientCertFile: filepath.Join(dir, "client-cert.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		OtherCAFile:    filepath.Join(dir, "other-ca.pem"),
	}
	now := time.Now()
	caKey, caDER, err := newCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "processor test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	brokerKey, brokerDER, err := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if err != nil {
		return nil, err
	}
	clientKey, clientDER, err := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "processor"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if err != nil {
		return nil, err
	}
	_, otherDER, err := newCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "another CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, nil, nil)
	if err != nil {
		return nil, err
	}

	brokerKeyPEM, err := keyPEM(brokerKey)
	if err != nil {
		return nil, err
	}
	clientKeyPEM, err := keyPEM(clientKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path string
		data []byte
	}{
		{p.CAFile, certPEM(caDER)},
		{p.BrokerFile, append(append([]byte{}, brokerKeyPEM...), certPEM(brokerDER)...)},
		{p.BrokerCertFile, certPEM(brokerDER)},
		{p.BrokerKeyFile, brokerKeyPEM},
		{p.ClientCertFile, certPEM(clientDER)},
		{p.ClientKeyFile, clientKeyPEM},
		{p.OtherCAFile, certPEM(otherDER)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// newCert creates a key and a certificate from tmpl, signed by parent with
// parentKey (self-signed when parent is nil).
func newCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	return key, der, nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
