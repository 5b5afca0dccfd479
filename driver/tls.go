package driver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles are the TLS parameters of a backend URL: ca, cert, key,
// server_name and skip_verify (see TLSParams).
type TLSFiles struct {
	CA         string // PEM bundle of the CAs to trust instead of the system's
	Cert, Key  string // PEM client certificate and key: both or neither
	ServerName string // the name to verify the server's certificate against
	SkipVerify bool   // do not verify the server's certificate (tests only)
}

// Set reports whether any parameter was given.
func (f TLSFiles) Set() bool {
	return f.CA != "" || f.Cert != "" || f.Key != "" || f.ServerName != "" || f.SkipVerify
}

// TLSParams are the TLS parameters every backend with TLS takes, read into
// dst.
func TLSParams(dst *TLSFiles) []Param {
	return []Param{
		{Name: "ca", Usage: "PEM file of the CAs to trust instead of the system's", Set: StringParam(&dst.CA)},
		{Name: "cert", Usage: "PEM file of the client certificate (with key)", Set: StringParam(&dst.Cert)},
		{Name: "key", Usage: "PEM file of the client key (with cert)", Set: StringParam(&dst.Key)},
		{Name: "server_name", Usage: "the name to verify the server's certificate against", Set: StringParam(&dst.ServerName)},
		{Name: "skip_verify", Usage: "do not verify the server's certificate (tests only)", Set: BoolParam(&dst.SkipVerify)},
	}
}

// Config applies the parameters to base (a new configuration if base is
// nil) and returns it, with TLS 1.2 at least. Errors name the parameter
// and the file; the backend wraps them with ErrInvalidOption and its URL.
func (f TLSFiles) Config(base *tls.Config) (*tls.Config, error) {
	cfg := base
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	if f.ServerName != "" {
		cfg.ServerName = f.ServerName
	}
	if f.SkipVerify {
		cfg.InsecureSkipVerify = true
	}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("ca=%s: %v", f.CA, unwrapPath(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca=%s: no PEM certificate in the file", f.CA)
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("cert and key go together")
	}
	if f.Cert != "" {
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("cert=%s, key=%s: %v", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// unwrapPath drops the path that an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
