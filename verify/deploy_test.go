package verify

import (
	"reflect"
	"testing"
)

func TestDeploymentFromURLProxiesOnlyExplicitPlainEndpoints(t *testing.T) {
	for _, tc := range []struct {
		url       string
		endpoints []string
		proxied   string // URL given the endpoints p1:1, p2:2
	}{
		{"redis://127.0.0.1:6379/0", []string{"127.0.0.1:6379"}, "redis://p1:1/0"},
		{"etcd://h1:2379,h2:2379?prefix=x", []string{"h1:2379", "h2:2379"}, "etcd://p1:1,p2:2?prefix=x"},
		{"postgres://u:pw@db:5432/app?sslmode=disable", []string{"db:5432"}, "postgres://u:pw@p1:1/app?sslmode=disable"},
		{"redis://localhost/0", nil, ""},
		{"rediss://h:6380/0", nil, ""},
		{"etcd://h:2379?tls=1", nil, ""},
		{"mem://", nil, ""},
		{"::bad", nil, ""},
	} {
		d := DeploymentFromURL(tc.url)
		if !reflect.DeepEqual(d.Endpoints, tc.endpoints) {
			t.Errorf("%s: endpoints %q, want %q", tc.url, d.Endpoints, tc.endpoints)
		}
		want := tc.proxied
		if want == "" {
			want = tc.url
		}
		if got := d.URL([]string{"p1:1", "p2:2"}[:max(1, len(tc.endpoints))]); got != want {
			t.Errorf("%s: proxied URL %q, want %q", tc.url, got, want)
		}
	}
}
