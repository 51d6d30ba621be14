package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TLSFiles are PEM files made for one test: a private CA, a certificate it
// signed for the servers (127.0.0.1 and localhost; also good as a client
// certificate, as a Cluster bus and a replica need), one for a client, and a
// second CA that signed neither, with a client certificate of its own.
type TLSFiles struct {
	CACert, CAKey         string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	OtherCACert           string // a CA that did not sign the server's certificate
	OtherClientCert       string // a client certificate signed by OtherCACert
	OtherClientKey        string
	ExpiredClientCert     string // signed by CACert, expired an hour ago
	ExpiredClientKey      string
	caPool                *x509.CertPool
	clientPair            tls.Certificate
}

// NewTLSFiles writes the files into a temporary directory of tb.
func NewTLSFiles(tb testing.TB) *TLSFiles {
	tb.Helper()
	f, err := writeTLSFiles(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func writeTLSFiles(dir string) (*TLSFiles, error) {
	f := &TLSFiles{}
	ca, err := newCA(dir, "lockscope test CA", &f.CACert, &f.CAKey)
	if err != nil {
		return nil, err
	}
	other, err := newCA(dir, "another CA", &f.OtherCACert, new(string))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "redis"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	client := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "lockscope"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	expired := *client
	expired.NotBefore, expired.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Hour)
	otherClient := *client
	for _, c := range []struct {
		tmpl      *x509.Certificate
		by        issuer
		name      string
		cert, key *string
	}{
		{server, ca, "server", &f.ServerCert, &f.ServerKey},
		{client, ca, "client", &f.ClientCert, &f.ClientKey},
		{&expired, ca, "expired-client", &f.ExpiredClientCert, &f.ExpiredClientKey},
		{&otherClient, other, "other-client", &f.OtherClientCert, &f.OtherClientKey},
	} {
		if _, err := issue(dir, c.name, c.tmpl, c.by, c.cert, c.key); err != nil {
			return nil, err
		}
	}
	f.caPool = x509.NewCertPool()
	f.caPool.AddCert(ca.cert)
	if f.clientPair, err = tls.LoadX509KeyPair(f.ClientCert, f.ClientKey); err != nil {
		return nil, err
	}
	return f, nil
}

var serial atomic.Int64

func newCA(dir, name string, certFile, keyFile *string) (issuer, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	return issue(dir, filepath.Base(name), tmpl, issuer{}, certFile, keyFile)
}

// issue signs tmpl with by (self-signed when by is zero) and writes the
// certificate and its key as PEM files.
func issue(dir, name string, tmpl *x509.Certificate, by issuer, certFile, keyFile *string) (issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issuer{}, err
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	parent, signer := tmpl, key
	if by.cert != nil {
		parent, signer = by.cert, by.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return issuer{}, fmt.Errorf("redistest: certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return issuer{}, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return issuer{}, err
	}
	base := filepath.Join(dir, sanitize(name))
	*certFile, *keyFile = base+".crt", base+".key"
	if err := os.WriteFile(*certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return issuer{}, err
	}
	if err := os.WriteFile(*keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		return issuer{}, err
	}
	return issuer{cert, key}, nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// ClientConfig is a client TLS configuration that trusts the CA and shows
// the client certificate.
func (f *TLSFiles) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: f.caPool, Certificates: []tls.Certificate{f.clientPair}, MinVersion: tls.VersionTLS12}
}

// serverArgs are the redis-server arguments that serve TLS only, on port,
// and require client certificates signed by the CA. With cluster, the
// Cluster bus speaks TLS too; replication always does.
func (f *TLSFiles) serverArgs(port int, cluster bool) []string {
	a := []string{
		"--port", "0",
		"--tls-port", fmt.Sprint(port),
		"--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CACert,
		"--tls-auth-clients", "yes",
		"--tls-replication", "yes",
	}
	if cluster {
		a = append(a, "--tls-cluster", "yes")
	}
	return a
}

// sentinelConf is the TLS part of a Sentinel's configuration file: it
// answers over TLS only and reaches the master and replica over TLS.
func (f *TLSFiles) sentinelConf() string {
	return fmt.Sprintf("tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\ntls-replication yes\n",
		f.ServerCert, f.ServerKey, f.CACert)
}
