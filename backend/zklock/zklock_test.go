package zklock

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// testSession is the session timeout of the tests' drivers: short, so that
// expiry tests take seconds, and long enough for a busy 2-core machine.
const testSession = 4 * time.Second

// zkURL is the URL of a deployment (or of proxies in front of it).
func zkURL(addrs []string, root, query string) string {
	u := "zk://" + strings.Join(addrs, ",") + root
	if query != "" {
		u += "?" + query
	}
	return u
}

// openURL opens a driver, closed when the test ends.
func openURL(t testing.TB, raw string) *Driver {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Open(ctx, u)
	if err != nil {
		t.Fatalf("Open(%s): %v", dlock.Redact(raw), err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestOnStandaloneServer runs the conformance suite and the ZooKeeper-specific tests
// against one standalone server, started once for all of them.
func TestOnStandaloneServer(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	query := "session_timeout=" + testSession.String()
	open := func(t testing.TB, root string) *Driver { return openURL(t, zkURL(z.Addrs(), root, query)) }

	t.Run("Conformance", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
				if addrs == nil {
					addrs = z.Addrs()
				}
				u, err := url.Parse(zkURL(addrs, "/conformance", query))
				if err != nil {
					return nil, err
				}
				return Open(ctx, u)
			},
			Endpoints: z.Addrs(),
			URL:       zkURL(z.Addrs(), "/conformance", query),
			Restart:   z.Restart,
			TTL:       testSession,
			Fair:      true,
		})
	})
	t.Run("WaitersWatchOnlyNodesJustAhead", func(t *testing.T) { testNoHerd(t, z, open) })
	t.Run("PausedServerExpiresSessionAndNextTokenIsHigher", func(t *testing.T) { testPausedServer(t, z, open) })
	t.Run("ExpiredSessionClosesLostWhenHolderReconnects", func(t *testing.T) { testServerEndsSession(t, z, open) })
	t.Run("ShortDisconnectionKeepsLease", func(t *testing.T) { testShortDisconnectKeepsLease(t, z, open) })
	t.Run("ConnectionCutsDuringLockLeaveNoOrphans", func(t *testing.T) { testCutsLeaveNoOrphans(t, z, open) })
	t.Run("DigestACLKeepsOtherIdentitiesOut", func(t *testing.T) { testDigestACL(t, z) })
	t.Run("EmptyParentsAreDeleted", func(t *testing.T) { testEmptyParentsGo(t, z, open) })
	t.Run("ServerRestartWhileHeld", func(t *testing.T) { testRestarts(t, z, open) })
	t.Run("BreakOfLockReleasedMeanwhileIsNotHeld", func(t *testing.T) { testBreakOfReleasedLockIsNotHeld(t, z, open) })
	t.Run("ReleaseAfterSessionExpiredIsLeaseLost", func(t *testing.T) { testReleaseAfterSessionExpired(t, z, open) })
	t.Run("SemaphoreWaiterWakesOnAnyReleaseAhead", func(t *testing.T) { testSemaphoreWakesOnAnyReleaseAhead(t, open) })
	t.Run("SemaphoreDisagreeingLimitsKeepQueueOrder", func(t *testing.T) { testSemaphoreDisagreeingLimitsKeepQueueOrder(t, open) })
}

func TestCapabilitiesFollowTheNegotiatedSession(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	// The server grants at most 120s (testenv's maxSessionTimeout); ask
	// for more and the driver must use what the server negotiated.
	d := openURL(t, zkURL(z.Addrs(), "", "session_timeout=10m"))
	if got := d.Capabilities().MinTTL; got != 120*time.Second {
		t.Errorf("MinTTL = %v, want the negotiated 2m0s", got)
	}
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), driver.Request{Name: "x", Owner: strings.Repeat("a", 32), TTL: time.Hour, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 80*time.Second {
		t.Errorf("Grant.TTL = %v, want two thirds of the 2m session", g.TTL)
	}
	if err := d.Release(testenv.Context(t, 30*time.Second), driver.Held{Name: "x", Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
}

func TestEscapedNamesAreOneSegmentAndDecodeBack(t *testing.T) {
	names := []string{"a", ".", "..", "...", ".a", "a.", "a/b", "/", "%", "%2F", "a%b", "a\x00b", "\x7f",
		"ключ", "锁/秒杀", "🔒", " ", "a b", "_c_x-lock-0000000001", "zookeeper", strings.Repeat("é", 512)}
	seen := map[string]string{}
	for _, n := range names {
		seg := escapeName(n)
		if prev, dup := seen[seg]; dup {
			t.Errorf("%q and %q both escape to %q", n, prev, seg)
		}
		seen[seg] = n
		if seg == "." || seg == ".." || strings.ContainsAny(seg, "/\x00") {
			t.Errorf("escapeName(%q) = %q: not a valid path segment", n, seg)
		}
		for _, r := range seg {
			if r < 0x20 || r >= 0x7f {
				t.Errorf("escapeName(%q) = %q: contains %U", n, seg, r)
			}
		}
		if back, ok := unescapeName(seg); !ok || back != n {
			t.Errorf("unescapeName(escapeName(%q)) = %q, %v", n, back, ok)
		}
	}
	for _, seg := range []string{"%", "%4", "%zz", "%2f", "%41", "a%2", "", "."} {
		if n, ok := unescapeName(seg); ok {
			t.Errorf("unescapeName(%q) = %q: a segment escapeName cannot produce was accepted", seg, n)
		}
	}
}

func TestOpenRejectsBadURLsWithoutShowingThePassword(t *testing.T) {
	for _, raw := range []string{
		"zk://u:hunter2@127.0.0.1:1/?session_timeout=abc",
		"zk://u:hunter2@127.0.0.1:1/?session_timeout=-1s",
		"zk://u:hunter2@127.0.0.1:1/?bogus=1",
		"zk://u:hunter2@127.0.0.1:1,/x",
		"zk://u:hunter2@127.0.0.1:1/a//b",
		"zk://u:hunter2@127.0.0.1:1/a/../b",
		"zk://:hunter2@127.0.0.1:1/x",
	} {
		_, err := dlock.Open(testenv.Context(t, 10*time.Second), raw)
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%q): got %v, want ErrInvalidOption", dlock.Redact(raw), err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error shows the password: %v", dlock.Redact(raw), err)
		}
	}
	u, err := url.Parse("zk://h1,h2:2182/a/b/?session_timeout=3s&connect_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseURL(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"h1:2181", "h2:2182"}; strings.Join(cfg.hosts, " ") != strings.Join(want, " ") {
		t.Errorf("hosts = %v, want %v", cfg.hosts, want)
	}
	if cfg.root != "/a/b" || cfg.sessionTimeout != 3*time.Second || cfg.connectTimeout != time.Second {
		t.Errorf("parsed %+v", cfg)
	}
	// An unreachable ensemble: ErrUnavailable within the connect timeout.
	_, err = dlock.Open(testenv.Context(t, 30*time.Second), "zk://u:hunter2@127.0.0.1:1/x?connect_timeout=500ms")
	if !errors.Is(err, dlock.ErrUnavailable) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of an unreachable server: %v; want ErrUnavailable without the password", err)
	}
}

// TestOnThreeServerEnsemble runs the conformance suite against a 3-server ensemble on
// loopback, asks a lagging follower, and stops the leader while locks are
// held and taken.
func TestOnThreeServerEnsemble(t *testing.T) {
	z := testenv.StartZooKeeperEnsemble(t, 3, testenv.ZooKeeperOptions{})
	query := "session_timeout=" + testSession.String()
	open := func(t testing.TB, root string) *Driver { return openURL(t, zkURL(z.Addrs(), root, query)) }

	t.Run("Conformance", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
				if addrs == nil {
					addrs = z.Addrs()
				}
				u, err := url.Parse(zkURL(addrs, "/conformance", query))
				if err != nil {
					return nil, err
				}
				return Open(ctx, u)
			},
			Endpoints: z.Addrs(),
			URL:       zkURL(z.Addrs(), "/conformance", query),
			Restart:   z.Restart,
			TTL:       testSession,
			Fair:      true,
		})
	})
	t.Run("LaggingFollowerAnswersAfterSync", func(t *testing.T) { testLaggingFollower(t, z) })
	t.Run("StoppedLeaderDoesNotStopGrants", func(t *testing.T) { testLeaderStopped(t, z, open) })
}
