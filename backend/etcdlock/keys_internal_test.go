package etcdlock

import (
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestEscapedNamesAreInjectiveAndKeepPrefixes(t *testing.T) {
	names := []string{
		"a", "a/", "a/b", "a%2F", "a%", "%", "/", "//", "a\x00", "a\x00b", "\x00",
		"a b", "ä/ö", "日本語", "a\x7f", "a\n", "A", "a/b/c", "ab", strings.Repeat("/", 1024),
	}
	seen := map[string]string{}
	for _, n := range names {
		e := escapeName(n)
		if strings.ContainsRune(e, '/') {
			t.Errorf("escapeName(%q) = %q contains '/'", n, e)
		}
		if prev, dup := seen[e]; dup {
			t.Errorf("escapeName(%q) = escapeName(%q) = %q", n, prev, e)
		}
		seen[e] = n
		if back, ok := unescapeName(e); !ok || back != n {
			t.Errorf("unescapeName(escapeName(%q)) = %q, %v", n, back, ok)
		}
		for _, p := range names {
			if strings.HasPrefix(n, p) != strings.HasPrefix(e, escapeName(p)) {
				t.Errorf("prefix %q of %q: escaped %q of %q disagrees", p, n, escapeName(p), e)
			}
		}
	}
}

func TestUnescapeRejectsForeignKeys(t *testing.T) {
	for _, s := range []string{"a/b", "%2", "%zz", "%41", "a\x00"} {
		if n, ok := unescapeName(s); ok {
			t.Errorf("unescapeName(%q) = %q, want rejected", s, n)
		}
	}
}

func TestSplitKey(t *testing.T) {
	d := newDriver(nil)
	d.prefix = "p/"
	owner := "694d7f3a0c1b2e45"
	name := "x/y\x00z"
	key := d.lockKey(name, 0x694d7f3a0c1b2e45)
	if got := key; got != "p/x%2Fy%00z/"+owner {
		t.Fatalf("lockKey = %q", got)
	}
	n, o, ok := d.splitKey(key)
	if !ok || n != name || o != owner {
		t.Fatalf("splitKey(%q) = %q, %q, %v", key, n, o, ok)
	}
	for _, k := range []string{"q/x/" + owner, "p/x", "p/x/", "p/x/y/z", "p//" + owner} {
		if _, _, ok := d.splitKey(k); ok {
			t.Errorf("splitKey(%q) accepted a key dlock does not write", k)
		}
	}
}

// In compat=etcdctl a key is concurrency.Mutex's: the name verbatim, "/",
// and the lease ID in hex without leading zeros; List keeps only keys of
// that form whose hex is their own lease's.
func TestEtcdctlCompatKeysAreMutexKeys(t *testing.T) {
	d := newDriver(nil)
	d.compat = CompatEtcdctl
	const lease = 0x35fa24534d3e803 // 15 hex digits
	key := d.lockKey("x/y%", lease)
	if key != "x/y%/35fa24534d3e803" {
		t.Fatalf("lockKey = %q", key)
	}
	if name, ok := mutexName(&mvccpb.KeyValue{Key: []byte(key), Lease: lease}); !ok || name != "x/y%" {
		t.Errorf("mutexName(%q) = %q, %v", key, name, ok)
	}
	for _, kv := range []*mvccpb.KeyValue{
		{Key: []byte(key)},                                   // no lease
		{Key: []byte(key), Lease: lease + 1},                 // another lease
		{Key: []byte("x/y%/035fa24534d3e803"), Lease: lease}, // leading zero
		{Key: []byte("/35fa24534d3e803"), Lease: lease},      // no name
	} {
		if name, ok := mutexName(kv); ok {
			t.Errorf("mutexName(%q, lease %x) = %q, accepted a key concurrency.Mutex does not write", kv.Key, kv.Lease, name)
		}
	}
}

func TestTTLRoundsUpToWholeSeconds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"1ns", 1}, {"1s", 1}, {"1.001s", 2}, {"1500ms", 2}, {"15s", 15}} {
		d, _ := time.ParseDuration(c.in)
		if got := ttlSeconds(d); got != c.want {
			t.Errorf("ttlSeconds(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}
