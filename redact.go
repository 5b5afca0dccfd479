package dlock

import (
	"errors"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Redact returns rawURL with every secret replaced by "xxxxx", for
// printing: the user-info password (or API key), and the values of query
// parameters that carry one (password=, sslpassword=, and any parameter
// named like a password, secret or token). File names (sslkey=, tls-key=)
// stay readable.
func Redact(rawURL string) string {
	return redactURL(rawURL)
}

// redactErr removes the secrets of rawURL (see Redact) from err's message,
// should a backend's error have quoted them.
func redactErr(err error, rawURL string) error {
	return redactError(err, rawURL)
}

// mask replaces every secret that Redact and redactErr hide.
const mask = "xxxxx"

// isSecretParam reports whether a URL query parameter carries a secret.
// The backends' parsers take these: password and sslpassword (PostgreSQL,
// read by pgx; go-sql-driver/mysql would pass a password= on as a session
// variable). Every other secret of a backend URL is the user-info password
// (etcd, Redis, Redlock, ZooKeeper digest, MySQL, and Temporal's API key).
// Names that conventionally carry secrets are hidden too, whatever the
// backend, so that a misplaced one is not printed either; parameters that
// name files (sslkey, tls-key, cacert) or variables (api-key-env) are not
// secrets and stay readable.
func isSecretParam(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "", ".", "").Replace(name))
	switch n {
	case "pass", "passwd", "pwd", "apikey", "accesskey", "secretkey", "auth":
		return true
	}
	for _, suffix := range []string{"password", "passwd", "secret", "token"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return false
}

// secretKV finds key=value pairs with a secret's key in text that is not a
// parseable URL (a keyword/value connection string, a broken URL); the
// value ends at '&', ';', '#' or white space, or is quoted with '.
var secretKV = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z0-9._-]+=)('[^']*'|[^&;#\s]*)`)

// redactURL is Redact.
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Unparseable: hide everything between "://" and the last "@", and
		// the values of secret parameters.
		out := rawURL
		if i, j := strings.Index(out, "://"), strings.LastIndex(out, "@"); i >= 0 && j > i {
			out = out[:i+3] + mask + out[j:]
		}
		return redactKV(out)
	}
	changed := false
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), mask)
		changed = true
	}
	if q, ok := redactQuery(u.RawQuery); ok {
		u.RawQuery, changed = q, true
	}
	if !changed {
		// Nothing to hide as a URL (u.String would turn "mem://" into
		// "mem:"); a keyword/value string parses as a path.
		return redactKV(rawURL)
	}
	return redactKV(u.String())
}

// redactKV masks the values of secret key=value pairs in s.
func redactKV(s string) string {
	return secretKV.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretKV.FindStringSubmatch(m)
		key := strings.TrimLeft(strings.TrimSuffix(sub[1], "="), "?&; \t\r\n")
		if !isSecretParam(key) {
			return m
		}
		return sub[1] + mask
	})
}

// redactQuery masks the values of secret parameters in a raw query, keeping
// every other byte as it was. ok reports whether anything was masked.
func redactQuery(raw string) (string, bool) {
	if raw == "" {
		return raw, false
	}
	parts := strings.Split(raw, "&")
	ok := false
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err == nil {
			k = key
		}
		if isSecretParam(k) {
			parts[i] = strings.SplitN(p, "=", 2)[0] + "=" + mask
			ok = true
		}
	}
	return strings.Join(parts, "&"), ok
}

// secretsOf returns the secrets of rawURL in every form a message may quote
// them: as written, decoded, and encoded again the ways net/url does.
func secretsOf(rawURL string) []string {
	var vals []string
	add := func(v string) {
		if v == "" {
			return
		}
		vals = append(vals, v, url.QueryEscape(v), url.PathEscape(v),
			strings.TrimPrefix(url.UserPassword("", v).String(), ":"))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Take what lies between "://" and the last "@", after the first ':'.
		if i, j := strings.Index(rawURL, "://"), strings.LastIndex(rawURL, "@"); i >= 0 && j > i {
			if _, pw, ok := strings.Cut(rawURL[i+3:j], ":"); ok {
				add(pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					add(dec)
				}
			}
		}
	} else {
		if pw, ok := u.User.Password(); ok {
			add(pw)
		}
		for _, p := range strings.Split(u.RawQuery, "&") {
			k, v, _ := strings.Cut(p, "=")
			if key, err := url.QueryUnescape(k); err == nil {
				k = key
			}
			if isSecretParam(k) {
				add(v)
				if dec, err := url.QueryUnescape(v); err == nil {
					add(dec)
				}
			}
		}
	}
	for _, m := range secretKV.FindAllStringSubmatch(rawURL, -1) {
		if isSecretParam(strings.TrimLeft(strings.TrimSuffix(m[1], "="), "?&; \t\r\n")) {
			add(strings.Trim(m[2], "'"))
		}
	}
	return vals
}

// redactError is redactErr.
func redactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	secrets := secretsOf(rawURL)
	if len(secrets) == 0 || !chainShows(err, secrets) {
		return err
	}
	// Longest first, so that a secret is masked whole before a part of it.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	msg := err.Error()
	for _, s := range secrets {
		if !strings.Contains(mask, s) {
			msg = strings.ReplaceAll(msg, s, mask)
		}
	}
	return &redactedError{msg: msg, err: err}
}

// chainShows reports whether err or any error it wraps shows a secret.
func chainShows(err error, secrets []string) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			return true
		}
	}
	switch w := err.(type) {
	case interface{ Unwrap() error }:
		return chainShows(w.Unwrap(), secrets)
	case interface{ Unwrap() []error }:
		for _, e := range w.Unwrap() {
			if chainShows(e, secrets) {
				return true
			}
		}
	}
	return false
}

// redactedError shows a backend's error with the secrets masked. It
// matches what the error matched (errors.Is and errors.As see through it)
// but does not unwrap, so that walking the chain with errors.Unwrap cannot
// reach a message that shows a secret.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *redactedError) As(target any) bool   { return errors.As(e.err, target) }
