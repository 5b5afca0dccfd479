package verify

import (
	"net"
	"net/url"
	"strings"
)

// DeploymentFromURL describes a user's own deployment by its backend URL,
// for client-side faults only: the URL's hosts become the Endpoints (for
// the Net fault's proxies) when every host has an explicit port and the
// URL does not ask for verified TLS (rediss://, etcds://, tls=,
// sslmode=verify-full: the server's name would not match the proxy's
// 127.0.0.1); otherwise Endpoints is empty and every client uses rawURL
// as it is. It has no Restart or members: a user's servers are not ours to
// stop.
func DeploymentFromURL(rawURL string) Deployment {
	fixed := Deployment{URL: func([]string) string { return rawURL }}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fixed
	}
	q := u.Query()
	switch strings.ToLower(u.Scheme) {
	case "rediss", "etcds", "mem":
		return fixed
	}
	if q.Has("tls") || q.Has("ca") || q.Has("cacert") || q.Has("cert") || q.Get("sslmode") == "verify-full" {
		return fixed
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return fixed
		}
	}
	return Deployment{
		Endpoints: hosts,
		URL: func(endpoints []string) string {
			v := *u
			v.Host = strings.Join(endpoints, ",")
			return v.String()
		},
	}
}
