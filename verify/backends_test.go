package verify

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	_ "github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
	_ "github.com/dlock/dlock/backend/pglock"
	_ "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/backend/redlock"
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
	// fairMode: dlock.WithFair takes another path than the default mutex
	// (a queue with hand-off), so the mutex-fair workload runs too; where
	// the mutex is FIFO already (etcd, ZooKeeper, Temporal's default
	// mode) it would repeat the mutex's rows.
	fairMode bool
}

// joined returns a URL maker: scheme://e1,e2,…suffix.
func joined(scheme, suffix string) func([]string) string {
	return func(endpoints []string) string { return scheme + "://" + strings.Join(endpoints, ",") + suffix }
}

var backends = []backend{
	{
		name:   "etcd",
		faults: []Fault{None, Pause, Kill, Net, Restart, BreakPartition},
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
		// Members reach each other through testenv.EtcdPeers, so that one
		// can be cut off from the others while its clients reach it.
		name:   "etcd-3",
		faults: []Fault{Member, MemberCut},
		start: func(t testing.TB) Deployment {
			ctx := context.Background()
			members := startEtcdPeerCluster(t)
			var eps []string
			for _, m := range members.members {
				eps = append(eps, m.Endpoints()...)
			}
			var err error
			return Deployment{
				Endpoints: eps, URL: joined("etcd", ""), Members: 3,
				StopMember: func(i int) { members.members[i].Close() },
				StartMember: func(i int) {
					// A member rejoins while the other two serve: it starts at once.
					if members.members[i], err = etcdserver.Start(ctx, members.members[i].Config()); err != nil {
						t.Fatal(err)
					}
				},
				Isolate: members.peers.Isolate, Rejoin: members.peers.Rejoin,
				Leader: func() int {
					for i, m := range members.members {
						if m.IsLeader() {
							return i
						}
					}
					return -1
				},
			}
		},
	},
	{
		// Under evict, its memory is filled until the default policy,
		// noeviction, refuses writes: the lock is unavailable (never
		// granted twice) until the memory is freed.
		name:     "redis",
		fairMode: true,
		faults:   []Fault{None, Pause, Kill, Net, Restart, Skew, Evict, BreakPartition},
		start: func(t testing.TB) Deployment {
			srv := testenv.StartRedis(t, testenv.RedisAOF())
			mem := newRedisMemory(t, srv.Addr, false)
			return Deployment{Endpoints: []string{srv.Addr}, URL: joined("redis", "/0?durable_fencing=true"), Restart: srv.Restart, Fill: mem.fill, Free: mem.free}
		},
	},
	{
		// Redis with an evicting policy, accepted with allow_eviction=true:
		// a memory spike evicts the held lock (the only keys with a TTL are
		// dlock's), and another client may be granted it before the holder's
		// next renewal tells it that it lost the lease. The fence counter
		// has no TTL, so volatile-lru keeps it: the next token is higher,
		// and the fence refuses the old holder's writes.
		name:   "redis-evicting",
		faults: []Fault{Evict},
		allowances: []Allowance{{Name: "eviction", Fault: Evict, Notice: 2 * time.Second / 3, // a third of the TTL
			Reason: "with allow_eviction=true a held lock may be evicted and granted again; its holder learns it at its next renewal, within a third of its TTL (package redislock, Eviction)"}},
		start: func(t testing.TB) Deployment {
			srv := testenv.StartRedis(t, testenv.RedisArgs("--maxmemory-policy", "volatile-lru"))
			mem := newRedisMemory(t, srv.Addr, true)
			return Deployment{Endpoints: []string{srv.Addr}, URL: joined("redis", "/0?allow_eviction=true"), Fill: mem.fill, Free: mem.free}
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
		// Nodes without persistence: member and partition-restart restart
		// a node empty. The package documents that a node restarted empty
		// can break exclusion (not that tokens may repeat: see issue 17,
		// item 4): the old holder must then learn it at its next renewal.
		name:   "redlock",
		faults: []Fault{None, Pause, Kill, Net, Member, Skew, PartitionRestart, BreakPartition},
		allowances: []Allowance{{Name: "empty-restart", Fault: PartitionRestart, Notice: 2 * time.Second / 3, // a third of the TTL
			Reason: "a node restarted empty has lost the holder's lock: another client can win it and a node the holder's lock is missing from, before the holder's next renewal is refused by a majority (package redlock, What the fencing token guarantees)"}},
		start: func(t testing.TB) Deployment { return redlockNodes(t) },
	},
	{
		// Nodes with appendonly yes and appendfsync always, as the package
		// asks: a restarted node comes back with its locks and counters.
		name:   "redlock-aof",
		faults: []Fault{PartitionRestart},
		start:  func(t testing.TB) Deployment { return redlockNodes(t, testenv.RedisAOF()) },
	},
	{
		// The session timeout is the lease: the TTL of 2s asks for it.
		name:   "zookeeper",
		faults: []Fault{None, Pause, Kill, Net, Restart, BreakPartition},
		start: func(t testing.TB) Deployment {
			z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
			return Deployment{Endpoints: z.Addrs(), URL: joined("zk", "/verify?session_timeout=2s"), Restart: func() { z.Restart(t) }}
		},
	},
	{
		// The servers reach each other through proxies, so that one can be
		// cut off from the others while its clients reach it; syncLimit ×
		// tick (6s) is longer than the session timeout, so a cut follower
		// still answers its clients after the leader has expired their
		// sessions (issue 17's first case).
		name:   "zookeeper-3",
		faults: []Fault{Member, MemberCut},
		start: func(t testing.TB) Deployment {
			z := testenv.StartZooKeeperEnsemble(t, 3, testenv.ZooKeeperOptions{PeerProxies: true, SyncLimit: 30})
			return Deployment{
				Endpoints: z.Addrs(), URL: joined("zk", "/verify?session_timeout=2s"), Members: 3,
				StopMember: func(i int) { z.Servers[i].Kill() }, StartMember: func(i int) { z.Servers[i].Start(t) },
				Isolate: func(i int) { z.Servers[i].Isolate(t) }, Rejoin: func(i int) { z.Servers[i].Rejoin() },
				Leader: func() int { return slices.Index(z.Servers, z.Leader()) },
			}
		},
	},
	{
		name:     "postgres",
		fairMode: true,
		faults:   []Fault{None, Pause, Kill, Net, Restart, BreakPartition},
		start: func(t testing.TB) Deployment {
			pg := testenv.StartPostgres(t)
			return Deployment{
				Endpoints: []string{pg.Addr}, URL: func(eps []string) string { return pg.URL(eps[0], "") },
				Restart: func() { pg.Restart(t) },
			}
		},
	},
	{
		name:     "mariadb",
		fairMode: true,
		faults:   []Fault{None, Pause, Kill, Net, Restart, BreakPartition},
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
		faults: []Fault{None, Pause, Kill, Net, Restart, BreakPartition},
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

// redlockNodes starts three independent Redis nodes for Redlock.
func redlockNodes(t testing.TB, opts ...testenv.RedisOption) Deployment {
	var nodes []*testenv.Redis
	var eps []string
	for range 3 {
		n := testenv.StartRedis(t, opts...)
		nodes, eps = append(nodes, n), append(eps, n.Addr)
	}
	clients := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	states, err := redlock.New(clients) // for its nodes' fence states only
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = states.Close() })
	return Deployment{
		Endpoints: eps, URL: joined("redlock", ""), Members: 3,
		StopMember: func(i int) { nodes[i].Kill() }, StartMember: func(i int) { nodes[i].Start() },
		// Every node holds complete fence counters: a node restarted
		// empty has been re-seeded.
		Settled: func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := states.FenceStates(ctx)
			return err == nil && !slices.ContainsFunc(s, func(s string) bool { return s != "complete" })
		},
	}
}

// etcdPeerCluster is a 3-member embedded etcd whose members reach each
// other only through testenv.EtcdPeers.
type etcdPeerCluster struct {
	members []*etcdserver.Server
	peers   *testenv.EtcdPeers
}

func startEtcdPeerCluster(t testing.TB) *etcdPeerCluster {
	const n = 3
	peers := testenv.NewEtcdPeers(t, n, etcdserver.ClusterToken)
	cluster := map[string]string{}
	cfgs := make([]etcdserver.Config, n)
	dir := t.TempDir()
	for i := range cfgs {
		name := fmt.Sprintf("member%d", i)
		cluster[name] = peers.AdvertiseAddr(i)
		cfgs[i] = etcdserver.Config{
			Dir: filepath.Join(dir, name), Name: name, Cluster: cluster,
			PeerAddr: peers.AdvertiseAddr(i), PeerListenAddr: peers.ListenAddr(i),
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, err := etcdserver.StartMembers(ctx, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	c := &etcdPeerCluster{members: ms, peers: peers}
	t.Cleanup(func() {
		for _, m := range c.members {
			_ = m.Close()
		}
	})
	// The peer network tells members apart by ID: it must know them.
	for i, m := range ms {
		if m.MemberID() != peers.MemberID(i) {
			t.Fatalf("member %d has ID %x, the peer network expects %x", i, m.MemberID(), peers.MemberID(i))
		}
	}
	return c
}

// redisMemory fills a Redis server's memory for the Evict fault: it sets
// maxmemory a little above what the server uses and writes keys without a
// TTL until the server refuses a write (noeviction, or nothing left that
// the policy may evict) or, with lift, until the lock keys that existed
// have been evicted; lift then removes the limit at once (a memory spike).
// free deletes the keys and removes the limit.
type redisMemory struct {
	t    testing.TB
	rdb  *redis.Client
	lift bool
	keys int
}

func newRedisMemory(t testing.TB, addr string, lift bool) *redisMemory {
	m := &redisMemory{t: t, rdb: redis.NewClient(&redis.Options{Addr: addr}), lift: lift}
	t.Cleanup(func() { m.rdb.Close() })
	return m
}

func (m *redisMemory) fill() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := m.rdb.Info(ctx, "memory").Result()
	if err != nil {
		m.t.Errorf("evict: INFO memory: %v", err)
		return
	}
	_, rest, _ := strings.Cut(info, "used_memory:")
	used, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	if err != nil {
		m.t.Errorf("evict: used_memory in %q: %v", info, err)
		return
	}
	locks, _ := m.rdb.Keys(ctx, "dlock:*:lock").Result()
	if err := m.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+4<<20, 10)).Err(); err != nil {
		m.t.Errorf("evict: %v", err)
		return
	}
	value := strings.Repeat("x", 64<<10)
	for range 1000 { // 64MB at most
		err := m.rdb.Set(ctx, "verify-fill:"+strconv.Itoa(m.keys), value, 0).Err()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				m.t.Errorf("evict: fill: %v", err)
			}
			break
		}
		m.keys++
		if m.lift && len(locks) > 0 {
			if n, err := m.rdb.Exists(ctx, locks...).Result(); err == nil && n < int64(len(locks)) {
				break
			}
		}
	}
	if m.lift {
		if err := m.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			m.t.Errorf("evict: %v", err)
		}
	}
}

func (m *redisMemory) free() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for m.keys > 0 {
		m.keys--
		if err := m.rdb.Del(ctx, "verify-fill:"+strconv.Itoa(m.keys)).Err(); err != nil {
			m.t.Errorf("evict: free: %v", err)
			return
		}
	}
	if err := m.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		m.t.Errorf("evict: %v", err)
	}
}
