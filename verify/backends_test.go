package verify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
	_ "github.com/dlock/dlock/backend/pglock"
	_ "github.com/dlock/dlock/backend/redislock"
	_ "github.com/dlock/dlock/backend/redlock"
	_ "github.com/dlock/dlock/backend/temporallock"
	_ "github.com/dlock/dlock/backend/zklock"
	"github.com/dlock/dlock/internal/etcdserver"
	"github.com/dlock/dlock/internal/testenv"
)

// backend is one row of the verification table: how to start the backend's
// servers for the test, and which faults apply to it. Adding a backend to
// the verification is adding one entry to backends (and importing its
// package, so that its worker processes can open its URL).
type backend struct {
	name   string
	faults []Fault
	// start brings up a deployment that lives until the test ends.
	start func(t testing.TB) Deployment
	// ttl is the lease length (default 2s); bound the recovery bound
	// (default 5s).
	ttl, bound time.Duration
	// tokensMayReset: the backend documents that tokens restart with its
	// servers (no durable fencing).
	tokensMayReset bool
	// allowances are the backend's documented exceptions (Allowance).
	allowances []Allowance
}

// joined returns a URL maker: scheme://e1,e2,…suffix.
func joined(scheme, suffix string) func([]string) string {
	return func(endpoints []string) string { return scheme + "://" + strings.Join(endpoints, ",") + suffix }
}

var backends = []backend{
	{
		name:   "etcd",
		faults: []Fault{None, Pause, Kill, Net, Restart},
		start: func(t testing.TB) Deployment {
			ctx, dir := context.Background(), t.TempDir()
			srv, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			return Deployment{
				Endpoints: srv.Endpoints(),
				URL:       joined("etcd", ""),
				Restart: func() {
					srv.Close()
					if srv, err = etcdserver.Start(ctx, srv.Config()); err != nil {
						t.Fatal(err)
					}
				},
			}
		},
	},
	{
		name:   "etcd-3",
		faults: []Fault{Member},
		start: func(t testing.TB) Deployment {
			ctx := context.Background()
			members, err := etcdserver.StartCluster(ctx, t.TempDir(), 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			var eps []string
			for _, m := range members {
				eps = append(eps, m.Endpoints()...)
			}
			t.Cleanup(func() {
				for _, m := range members {
					m.Close()
				}
			})
			return Deployment{
				Endpoints: eps, URL: joined("etcd", ""), Members: 3,
				StopMember: func(i int) { members[i].Close() },
				StartMember: func(i int) {
					// A member rejoins while the other two serve: it starts at once.
					if members[i], err = etcdserver.Start(ctx, members[i].Config()); err != nil {
						t.Fatal(err)
					}
				},
			}
		},
	},
	{
		name:   "redis",
		faults: []Fault{None, Pause, Kill, Net, Restart, Skew},
		start: func(t testing.TB) Deployment {
			srv := testenv.StartRedis(t, testenv.RedisAOF())
			return Deployment{Endpoints: []string{srv.Addr}, URL: joined("redis", "/0?durable_fencing=true"), Restart: srv.Restart}
		},
	},
	{
		// Redis as most run it, without persistence: a restart empties it,
		// fencing tokens start again from 1, and the resource refuses every
		// write until they pass the highest it saw. Exclusion still holds.
		name:           "redis-volatile",
		faults:         []Fault{Restart},
		tokensMayReset: true,
		allowances: []Allowance{{Name: "volatile-restart", Fault: Restart,
			Reason: "a restart of Redis without persistence frees every lock at once (package redislock, Guarantees)"}},
		start: func(t testing.TB) Deployment {
			srv := testenv.StartRedis(t)
			return Deployment{Endpoints: []string{srv.Addr}, URL: joined("redis", "/0"), Restart: srv.Restart}
		},
	},
	{
		name:   "redlock",
		faults: []Fault{None, Pause, Kill, Net, Member, Skew},
		start: func(t testing.TB) Deployment {
			var nodes []*testenv.Redis
			var eps []string
			for range 3 {
				n := testenv.StartRedis(t)
				nodes, eps = append(nodes, n), append(eps, n.Addr)
			}
			return Deployment{
				Endpoints: eps, URL: joined("redlock", ""), Members: 3,
				StopMember: func(i int) { nodes[i].Kill() }, StartMember: func(i int) { nodes[i].Start() },
			}
		},
	},
	{
		// The session timeout is the lease: the TTL of 2s asks for it.
		name:   "zookeeper",
		faults: []Fault{None, Pause, Kill, Net, Restart},
		start: func(t testing.TB) Deployment {
			z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
			return Deployment{Endpoints: z.Addrs(), URL: joined("zk", "/verify?session-timeout=2s"), Restart: func() { z.Restart(t) }}
		},
	},
	{
		name:   "zookeeper-3",
		faults: []Fault{Member},
		start: func(t testing.TB) Deployment {
			z := testenv.StartZooKeeperEnsemble(t, 3, testenv.ZooKeeperOptions{})
			return Deployment{
				Endpoints: z.Addrs(), URL: joined("zk", "/verify?session-timeout=2s"), Members: 3,
				StopMember: func(i int) { z.Servers[i].Kill() }, StartMember: func(i int) { z.Servers[i].Start(t) },
			}
		},
	},
	{
		name:   "postgres",
		faults: []Fault{None, Pause, Kill, Net, Restart},
		start: func(t testing.TB) Deployment {
			pg := testenv.StartPostgres(t)
			return Deployment{
				Endpoints: []string{pg.Addr}, URL: func(eps []string) string { return pg.URL(eps[0], "") },
				Restart: func() { pg.Restart(t) },
			}
		},
	},
	{
		name:   "mariadb",
		faults: []Fault{None, Pause, Kill, Net, Restart},
		start: func(t testing.TB) Deployment {
			m := testenv.StartMariaDB(t)
			return Deployment{
				Endpoints: []string{m.Addr},
				URL:       func(eps []string) string { return m.URL(testenv.MariaDBUser, testenv.MariaDBPassword, eps[0]) },
				Restart:   func() { m.Restart(t) },
			}
		},
	},
	{
		name:   "temporal",
		faults: []Fault{None, Pause, Kill, Net, Restart},
		bound:  10 * time.Second, // the dev server restarts in seconds
		start: func(t testing.TB) Deployment {
			srv := testenv.StartTemporal(t)
			return Deployment{
				Endpoints: []string{srv.Addr},
				URL:       func(eps []string) string { return "temporal://" + eps[0] + "/" + srv.Namespace },
				Restart:   func() { srv.Restart(t) },
			}
		},
	},
}

func (b backend) String() string { return fmt.Sprintf("%s %v", b.name, b.faults) }
