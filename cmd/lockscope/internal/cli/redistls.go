package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// redisTLS is the TLS flags for Redis: a private CA to trust and a client
// certificate to show. They add to what a rediss:// URL already does (TLS,
// the system's CAs, ?skip_verify=true).
type redisTLS struct {
	caCert     string
	clientCert string
	clientKey  string
}

func (t *redisTLS) define(f *flagSet) {
	f.String(&t.caCert, "redis-ca-cert", "LOCKSCOPE_REDIS_CA_CERT", "", "PEM file of the CA(s) that signed Redis's certificate, trusted instead of the system's (needs a rediss:// URL)")
	f.meta["redis-ca-cert"] = "FILE"
	f.String(&t.clientCert, "redis-client-cert", "LOCKSCOPE_REDIS_CLIENT_CERT", "", "PEM file of the client certificate shown to a Redis that requires one (tls-auth-clients), with --redis-client-key")
	f.meta["redis-client-cert"] = "FILE"
	f.String(&t.clientKey, "redis-client-key", "LOCKSCOPE_REDIS_CLIENT_KEY", "", "PEM file of the client certificate's private key")
	f.meta["redis-client-key"] = "FILE"
}

func (t *redisTLS) set() bool { return t.caCert != "" || t.clientCert != "" || t.clientKey != "" }

// tlsFiles is what the TLS flags' files hold.
type tlsFiles struct {
	roots *x509.CertPool // nil: the system's
	certs []tls.Certificate
}

// load reads the files; nil when no flag is set. Every error is a usage
// error naming the flag, its variable and the file.
func (t *redisTLS) load() (*tlsFiles, error) {
	if !t.set() {
		return nil, nil
	}
	bad := func(format string, args ...any) error {
		return &Error{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
	}
	files := &tlsFiles{}
	if t.caCert != "" {
		pem, err := os.ReadFile(t.caCert)
		if err != nil {
			return nil, bad("--redis-ca-cert: %v (LOCKSCOPE_REDIS_CA_CERT)", pathError(err))
		}
		files.roots = x509.NewCertPool()
		if !files.roots.AppendCertsFromPEM(pem) {
			return nil, bad("--redis-ca-cert %s: no PEM certificate in the file (LOCKSCOPE_REDIS_CA_CERT)", t.caCert)
		}
	}
	switch {
	case t.clientCert != "" && t.clientKey == "":
		return nil, bad("--redis-client-cert needs --redis-client-key (LOCKSCOPE_REDIS_CLIENT_KEY)")
	case t.clientKey != "" && t.clientCert == "":
		return nil, bad("--redis-client-key needs --redis-client-cert (LOCKSCOPE_REDIS_CLIENT_CERT)")
	case t.clientCert != "":
		for _, f := range []struct{ flag, env, path string }{
			{"--redis-client-cert", "LOCKSCOPE_REDIS_CLIENT_CERT", t.clientCert},
			{"--redis-client-key", "LOCKSCOPE_REDIS_CLIENT_KEY", t.clientKey},
		} {
			if _, err := os.Stat(f.path); err != nil {
				return nil, bad("%s: %v (%s)", f.flag, pathError(err), f.env)
			}
		}
		pair, err := tls.LoadX509KeyPair(t.clientCert, t.clientKey)
		if err != nil {
			return nil, bad("--redis-client-cert %s with --redis-client-key %s: %v", t.clientCert, t.clientKey, err)
		}
		files.certs = []tls.Certificate{pair}
	}
	return files, nil
}

// pathError is err without Go's "open " prefix: "FILE: no such file or
// directory".
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// apply adds the files to the TLS configuration go-redis made from a
// rediss:// URL (nil for redis://: no TLS, nothing to add).
func (f *tlsFiles) apply(cfg *tls.Config) *tls.Config {
	if f == nil || cfg == nil {
		return cfg
	}
	if f.roots != nil {
		cfg.RootCAs = f.roots
	}
	if f.certs != nil {
		cfg.Certificates = f.certs
	}
	return cfg
}

// tlsHint says what to check after a failed connection, when the failure
// is TLS's; "" otherwise.
func tlsHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	var record tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return "Redis's certificate is not signed by a CA lockscope trusts: give the CA's PEM file with --redis-ca-cert (LOCKSCOPE_REDIS_CA_CERT)"
	case errors.As(err, &host) || strings.Contains(msg, "certificate is valid for"):
		return "Redis's certificate does not name the host of the URL: connect by a name the certificate holds"
	case errors.As(err, &invalid) || strings.Contains(msg, "certificate has expired"):
		return "Redis's certificate is not valid now"
	case errors.As(err, &alert) || strings.Contains(msg, "remote error: tls:"):
		if strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") ||
			strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "expired certificate") ||
			strings.Contains(msg, "handshake failure") {
			return "Redis refused the client certificate: it requires one signed by its CA (--redis-client-cert and --redis-client-key)"
		}
		return "Redis refused the TLS handshake"
	case errors.As(err, &record) || strings.Contains(msg, "does not look like a TLS handshake"):
		return "the server answered in plain text: if Redis does not speak TLS on this port, use a redis:// URL"
	}
	return ""
}
