package redisscript

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/dlock/dlock"
)

// TLSParams are a URL's TLS parameters, which the backends apply
// themselves (go-redis's cluster URLs know neither, and Redlock's nodes
// are built from one URL):
//
//	ca=/path/ca.pem    trust the CAs in this PEM file instead of the system's
//	skip_verify=true   do not check the server's certificate (tests only)
type TLSParams struct {
	CA         string
	SkipVerify string
}

// TakeTLSParams reads the TLS parameters of q and removes them from it.
func TakeTLSParams(q url.Values) TLSParams {
	p := TLSParams{CA: q.Get("ca"), SkipVerify: q.Get("skip_verify")}
	q.Del("ca")
	q.Del("skip_verify")
	return p
}

// Apply sets the parameters in cfg, the TLS configuration of u's
// connections; cfg is nil when u is not a TLS URL, and then any parameter
// is an error that names tlsScheme, the scheme that would use TLS.
func (p TLSParams) Apply(u *url.URL, cfg *tls.Config, tlsScheme string) error {
	if cfg == nil {
		if p.CA != "" || p.SkipVerify != "" {
			return fmt.Errorf("%w: %s URL %s: ca and skip_verify need the %s:// scheme (TLS)", dlock.ErrInvalidOption, u.Scheme, u.Redacted(), tlsScheme)
		}
		return nil
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	if p.SkipVerify != "" {
		b, err := strconv.ParseBool(p.SkipVerify)
		if err != nil {
			return fmt.Errorf("%w: %s URL: skip_verify=%q: want true or false", dlock.ErrInvalidOption, u.Scheme, p.SkipVerify)
		}
		cfg.InsecureSkipVerify = b
	}
	if p.CA != "" {
		pem, err := os.ReadFile(p.CA)
		if err != nil {
			return fmt.Errorf("%w: %s URL: ca=%s: %v", dlock.ErrInvalidOption, u.Scheme, p.CA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: %s URL: ca=%s: no PEM certificate in the file", dlock.ErrInvalidOption, u.Scheme, p.CA)
		}
		cfg.RootCAs = pool
	}
	return nil
}
