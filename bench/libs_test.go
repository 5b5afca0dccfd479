package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bsmlock "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
	_ "github.com/dlock/dlock/backend/pglock"
	dredis "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/backend/zklock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// role says what a library is in the comparison.
type role int

const (
	ours      role = iota // dlock
	incumbent             // a peer library
	floor                 // raw round trips, no lock at all
	reference             // the least a lock with the same guarantees must do (scenario A only)
	handoff               // in scenario B only: the least a contended hand-off must do, or dlock on a server set up otherwise
)

// locker takes the lock named key and returns the function that releases it.
type locker func(ctx context.Context, key string) (unlock func() error, err error)

// worker is one client of a library, with its own connection(s), as a
// separate process would have.
type worker struct {
	lock  locker
	close func()
}

// lib is one library under test on one backend.
type lib struct {
	backend string // redis, etcd, zookeeper, postgres, mariadb
	name    string // dlock-fair, redsync, ...
	role    role
	how     string // how it is used, for the settings table
	// open connects a new worker; locks it takes live for ttl.
	open func(t testing.TB, ttl time.Duration) worker
	// shed, if not nil, drops what this process caches for the locks it
	// holds and can rebuild from the server, the locks still held;
	// shedWhat says what that is. Scenario C measures the heap and
	// goroutines per held lock again after it.
	shed     func()
	shedWhat string

	sent  atomic.Int64   // requests its clients sent (Redis and etcd only)
	redis *testenv.Redis // the server whose INFO commandstats counts commands (Redis only)
	// caps is what the backend's driver promised when a dlock worker of
	// this library was last opened (dlock only; nil until then).
	caps *driver.Capabilities
}

// cached returns a locker that makes the per-name object (a mutex) once
// per name in a row, as a program that locks one name in a loop does.
func cached[M any](mk func(key string) M, lock func(ctx context.Context, m M) (func() error, error)) locker {
	var last string
	var m M
	return func(ctx context.Context, key string) (func() error, error) {
		if key != last || last == "" {
			m, last = mk(key), key
		}
		return lock(ctx, m)
	}
}

// sentCounter is a go-redis hook that counts the requests a client sends.
type sentCounter struct{ n *atomic.Int64 }

func (h sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

func (l *lib) redisClient() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: l.redis.Addr})
	rdb.AddHook(sentCounter{&l.sent})
	return rdb
}

// dlockWorker locks through a dlock client of l; closeAlso closes what the
// driver does not own.
func dlockWorker(l *lib, c *dlock.Client, fair bool, closeAlso func()) worker {
	caps := c.Capabilities()
	l.caps = &caps
	var opts []dlock.Option
	if fair {
		opts = append(opts, dlock.WithFair())
	}
	return worker{
		lock: cached(func(key string) *dlock.Mutex { return c.Mutex(key, opts...) },
			func(ctx context.Context, m *dlock.Mutex) (func() error, error) {
				l, err := m.Lock(ctx)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}),
		close: func() {
			_ = c.Close()
			if closeAlso != nil {
				closeAlso()
			}
		},
	}
}

func openDlock(t testing.TB, rawURL string, ttl time.Duration) *dlock.Client {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, rawURL, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("open %s: %v", dlock.Redact(rawURL), err)
	}
	return c
}

func redisLibs(srv *testenv.Redis) []*lib {
	dl := func(name string, fair bool, how string) *lib {
		l := &lib{backend: "redis", name: name, role: ours, how: how, redis: srv}
		l.open = func(t testing.TB, ttl time.Duration) worker {
			rdb := l.redisClient()
			d, err := dredis.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			return dlockWorker(l, dlock.New(d, dlock.WithTTL(ttl)), fair, func() { _ = rdb.Close() })
		}
		return l
	}
	rs := &lib{backend: "redis", name: "redsync", role: incumbent, redis: srv,
		how: "go-redsync/redsync v4 defaults: 32 tries, 50–250 ms apart; expiry = the TTL"}
	rs.open = func(t testing.TB, ttl time.Duration) worker {
		rdb := rs.redisClient()
		rsc := redsync.New(goredis.NewPool(rdb))
		return worker{
			lock: cached(func(key string) *redsync.Mutex { return rsc.NewMutex("redsync/"+key, redsync.WithExpiry(ttl)) },
				func(ctx context.Context, m *redsync.Mutex) (func() error, error) {
					if err := m.LockContext(ctx); err != nil {
						return nil, err
					}
					return func() error { _, err := m.UnlockContext(context.Background()); return err }, nil
				}),
			close: func() { _ = rdb.Close() },
		}
	}
	bsm := &lib{backend: "redis", name: "bsm-linear1ms", role: incumbent, redis: srv,
		how: "bsm/redislock, RetryStrategy LinearBackoff(1ms) (it does not retry by default)"}
	bsm.open = func(t testing.TB, ttl time.Duration) worker {
		rdb := bsm.redisClient()
		c := bsmlock.New(rdb)
		opt := &bsmlock.Options{RetryStrategy: bsmlock.LinearBackoff(time.Millisecond)}
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				l, err := c.Obtain(ctx, "bsm/"+key, ttl, opt)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			},
			close: func() { _ = rdb.Close() },
		}
	}
	fl := &lib{backend: "redis", name: "floor: 2 PINGs", role: floor, redis: srv, how: "two PINGs on a go-redis client"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		rdb := fl.redisClient()
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if err := rdb.Ping(ctx).Err(); err != nil {
					return nil, err
				}
				return func() error { return rdb.Ping(context.Background()).Err() }, nil
			},
			close: func() { _ = rdb.Close() },
		}
	}
	// The least a fenced lock with an owner-checked release sends: a
	// script that INCRs a counter and SETs NX PX, a script that GETs,
	// compares and DELs; no metadata, no queue, no renewal.
	fencedAcquire := redis.NewScript(`local t = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return t end
return 0`)
	fencedRelease := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	fm := &lib{backend: "redis", name: "reference: fenced minimum", role: reference, redis: srv,
		how: "not a library: INCR + SET NX PX in one script, GET + compare + DEL in another, a random owner per lock"}
	fm.open = func(t testing.TB, ttl time.Duration) worker {
		rdb := fm.redisClient()
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				keys := []string{"fenced/{" + key + "}:lock", "fenced/{" + key + "}:fence"}
				owner := rand.Text()
				n, err := fencedAcquire.Run(ctx, rdb, keys, owner, ttl.Milliseconds()).Int64()
				if err != nil {
					return nil, err
				}
				if n == 0 {
					return nil, errors.New("fenced minimum: lock held")
				}
				return func() error { return fencedRelease.Run(context.Background(), rdb, keys[:1], owner).Err() }, nil
			},
			close: func() { _ = rdb.Close() },
		}
	}
	return []*lib{
		dl("dlock-fair", true, "backend/redislock, dlock.WithFair()"),
		dl("dlock-plain", false, "backend/redislock (an arrival may take a free lock; waiters queue)"),
		rs, bsm, fm, fl,
	}
}

func etcdLibs(endpoint string) []*lib {
	// client connects a worker of l, counting the unary requests it sends
	// (watch streams and lease keep-alive streams are not counted).
	client := func(t testing.TB, l *lib) *clientv3.Client {
		count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			l.sent.Add(1)
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
		})
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		return cli
	}
	dl := &lib{backend: "etcd", name: "dlock", role: ours, how: "backend/etcdlock (FIFO)"}
	dl.open = func(t testing.TB, ttl time.Duration) worker {
		cli := client(t, dl)
		d, err := etcdlock.New(cli)
		if err != nil {
			t.Fatal(err)
		}
		return dlockWorker(dl, dlock.New(d, dlock.WithTTL(ttl)), false, func() { _ = cli.Close() })
	}
	cm := &lib{backend: "etcd", name: "concurrency.Mutex", role: incumbent,
		how: "etcd client/v3/concurrency: one Session (lease TTL = the TTL) per worker, a Mutex per name"}
	cm.open = func(t testing.TB, ttl time.Duration) worker {
		cli := client(t, cm)
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)))
		if err != nil {
			t.Fatalf("etcd session: %v", err)
		}
		return worker{
			lock: cached(func(key string) *concurrency.Mutex { return concurrency.NewMutex(s, "/mutex/"+key) },
				func(ctx context.Context, m *concurrency.Mutex) (func() error, error) {
					if err := m.Lock(ctx); err != nil {
						return nil, err
					}
					return func() error { return m.Unlock(context.Background()) }, nil
				}),
			close: func() { _ = s.Close(); _ = cli.Close() },
		}
	}
	fl := &lib{backend: "etcd", name: "floor: 2 txn commits", role: floor, how: "a Txn that puts a key, then a Txn that deletes it"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		cli := client(t, fl)
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				k := "/floor/" + key
				if _, err := cli.Txn(ctx).Then(clientv3.OpPut(k, "x")).Commit(); err != nil {
					return nil, err
				}
				return func() error { _, err := cli.Txn(context.Background()).Then(clientv3.OpDelete(k)).Commit(); return err }, nil
			},
			close: func() { _ = cli.Close() },
		}
	}
	return []*lib{dl, cm, fl, etcdHandoff(client, false), etcdHandoff(client, true)}
}

// etcdHandoff is the least a queue lock on etcd does per hand-off, in raw
// client calls: a waiter queues (a Txn that reads the newest key under the
// name and puts its own after it, attached to its lease) and watches the
// key ahead while it waits, so that when the holder deletes its key, the
// delete's watch event alone grants the lock to the next waiter, which
// holds by create-revision order without another request. No metadata,
// no renewal per grant (one keep-alive stream per worker), no check of its
// own key. It takes a deleted key ahead for a release, which is right only
// while no waiter gives up: in B none does before the run's end, and a
// waiter woken after it gives up too.
//
// With check, the woken waiter reads once more before it holds: a
// serializable read of the keys up to its own, which finds nothing ahead
// of it and its own key there. A lock whose waiters may give up (or lose
// their key) cannot do with less; the difference between the two rows is
// what that read costs a hand-off.
func etcdHandoff(client func(testing.TB, *lib) *clientv3.Client, check bool) *lib {
	ho := &lib{backend: "etcd", name: "reference: raw hand-off", role: handoff,
		how: "not a library: Txn(get newest key, put own key with lease), watch the key ahead; its delete event grants; release = Delete"}
	if check {
		ho.name = "reference: raw hand-off + read"
		ho.how = "as the raw hand-off, and after the delete event one serializable read of the keys up to its own (nothing ahead, its own key there)"
	}
	ho.open = func(t testing.TB, ttl time.Duration) worker {
		cli := client(t, ho)
		ctx, stop := context.WithCancel(context.Background())
		gr, err := cli.Grant(ctx, max(int64(ttl/time.Second), 1))
		if err != nil {
			t.Fatalf("etcd lease: %v", err)
		}
		ka, err := cli.KeepAlive(ctx, gr.ID)
		if err != nil {
			t.Fatalf("etcd keep-alive: %v", err)
		}
		go func() {
			for range ka {
			}
		}()
		// A watch that stays open keeps the client's watch stream up:
		// etcd's client closes the stream when its last watch ends, and
		// would set one up again for every wait.
		cli.Watch(ctx, "/handoff/\x00")
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				pfx := "/handoff/" + key + "/"
				me := fmt.Sprintf("%s%x", pfx, int64(gr.ID))
				unlock := func() error { _, err := cli.Delete(context.Background(), me); return err }
				resp, err := cli.Txn(ctx).Then(clientv3.OpGet(pfx, clientv3.WithLastCreate()...),
					clientv3.OpPut(me, "", clientv3.WithLease(gr.ID))).Commit()
				if err != nil {
					return nil, err
				}
				ahead := resp.Responses[0].GetResponseRange().Kvs
				if len(ahead) == 0 {
					return unlock, nil
				}
				deleted, err := awaitDelete(ctx, cli, string(ahead[0].Key), ahead[0].CreateRevision, resp.Header.Revision)
				if err != nil {
					unlock()
					return nil, err
				}
				if check {
					// etcd sends a watch event before a read can see its
					// write: a serializable read older than the deletion
					// is done again, linearizable.
					opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(resp.Header.Revision),
						clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2), clientv3.WithKeysOnly()}
					g, err := cli.Get(ctx, pfx, append(opts, clientv3.WithSerializable())...)
					if err == nil && g.Header.Revision < deleted {
						g, err = cli.Get(ctx, pfx, opts...)
					}
					if err == nil && (len(g.Kvs) != 1 || string(g.Kvs[0].Key) != me) {
						err = fmt.Errorf("raw hand-off + read: %d keys up to ours after the delete ahead", len(g.Kvs))
					}
					if err != nil {
						unlock()
						return nil, err
					}
				}
				return unlock, nil
			},
			close: func() { stop(); _, _ = cli.Revoke(context.Background(), gr.ID); _ = cli.Close() },
		}
	}
	return ho
}

// awaitDelete returns when key, created at revision created and seen at
// revision seen, is deleted, with a revision at which it was gone. Its watch
// starts at the server's current revision, so that the server pushes the
// delete as it commits (a watch from an older revision waits for etcd's
// 100 ms catch-up loop); a read covers the gap between seen and the
// watch's start.
func awaitDelete(ctx context.Context, cli *clientv3.Client, key string, created, seen int64) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return 0, err
		}
		if wr.Created && wr.Header.Revision != seen {
			g, err := cli.Get(ctx, key, clientv3.WithSerializable(), clientv3.WithKeysOnly())
			if err != nil {
				return 0, err
			}
			if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != created {
				return g.Header.Revision, ctx.Err()
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				// A waiter ahead that gave up also deletes its key: after
				// the run's end, when every waiter gives up.
				return ev.Kv.ModRevision, ctx.Err()
			}
		}
	}
	return 0, errors.Join(ctx.Err(), errors.New("raw hand-off: the watch ended"))
}

// quietLogger drops go-zookeeper's log lines.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func zkConnect(t testing.TB, addr string) *zk.Conn {
	conn, _, err := zk.Connect([]string{addr}, zklock.DefaultSessionTimeout, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zookeeper: %v", err)
	}
	return conn
}

func zkLibs(addr string) []*lib {
	dl := &lib{backend: "zookeeper", name: "dlock", role: ours,
		how: "backend/zklock (FIFO; a lease is two thirds of the session; the session timeout asked is the TTL, at least zklock's default 10 s, within the server's limit of 2 min)"}
	dl.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A ZooKeeper lease lasts as long as its session allows: ask for
		// a session as long as the TTL the other backends are given, as
		// a user holding many locks would (C's 10 minutes: the server
		// grants its maxSessionTimeout). Each lease costs a renewal every
		// third of its length, and with the default 10 s session C's eight
		// clients on this machine fell behind at about half a million.
		session := max(ttl, zklock.DefaultSessionTimeout)
		d, err := zklock.Open(ctx, &url.URL{Scheme: "zk", Host: addr, Path: "/bench", RawQuery: "session_timeout=" + session.String()})
		if err != nil {
			t.Fatalf("zklock: %v", err)
		}
		return dlockWorker(dl, dlock.New(d, dlock.WithTTL(max(ttl, d.Capabilities().MinTTL))), false, nil)
	}
	zl := &lib{backend: "zookeeper", name: "zk.Lock", role: incumbent,
		how: "go-zookeeper/zk Lock (no context: a Lock call cannot be cancelled), one connection per worker"}
	zl.open = func(t testing.TB, ttl time.Duration) worker {
		conn := zkConnect(t, addr)
		return worker{
			lock: cached(func(key string) *zk.Lock { return zk.NewLock(conn, "/zklock/"+key, zk.WorldACL(zk.PermAll)) },
				func(ctx context.Context, l *zk.Lock) (func() error, error) {
					if err := l.Lock(); err != nil {
						return nil, err
					}
					return func() error { return l.Unlock() }, nil
				}),
			close: conn.Close,
		}
	}
	fl := &lib{backend: "zookeeper", name: "floor: create+delete", role: floor, how: "create an ephemeral node, then delete it"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		conn := zkConnect(t, addr)
		if _, err := conn.Create("/floor", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("zookeeper: %v", err)
		}
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				p, err := conn.Create("/floor/"+strings.ReplaceAll(key, "/", "-"), nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				if err != nil {
					return nil, err
				}
				return func() error { return conn.Delete(p, -1) }, nil
			},
			close: conn.Close,
		}
	}
	return []*lib{dl, zl, fl}
}

func postgresLibs(pg *testenv.Postgres) []*lib {
	dl := func(name string, fair bool, how string) *lib {
		l := &lib{backend: "postgres", name: name, role: ours, how: how}
		url := postgresDatabase(pg, name)
		l.open = func(t testing.TB, ttl time.Duration) worker {
			return dlockWorker(l, openDlock(t, url, ttl), fair, nil)
		}
		return l
	}
	fl := &lib{backend: "postgres", name: "floor: 2 statements", role: floor, how: "two SELECT 1 on one pgx connection"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pg.User, pg.Addr, pg.Database))
		if err != nil {
			t.Fatalf("postgres: %v", err)
		}
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
					return nil, err
				}
				return func() error { _, err := conn.Exec(context.Background(), "SELECT 1"); return err }, nil
			},
			close: func() { _ = conn.Close(context.Background()) },
		}
	}
	return []*lib{
		dl("dlock-fair", true, "backend/pglock, dlock.WithFair() (nobody passes a live waiter)"),
		dl("dlock-plain", false, "backend/pglock (an arrival may take a free lock; waiters queue)"),
		fl, postgresFenced(pg), postgresRing(pg),
	}
}

// postgresFenced is the least a fenced lock with an owner-checked release
// does on PostgreSQL, in raw pgx calls: two one-row commits. Each name
// has a row, made at its first lock and never deleted (so that its
// counter is a fencing token); the lock is one UPDATE that takes the row
// if it is free or expired, counts its token up and returns it; the
// unlock one UPDATE that frees it if the owner matches. No waiters, no
// notification, no holder metadata, no renewal.
func postgresFenced(pg *testenv.Postgres) *lib {
	fm := &lib{backend: "postgres", name: "reference: fenced minimum", role: reference,
		how: "not a library: a row per name, made once; lock = an UPDATE that takes a free or expired row and returns its token + 1, unlock = an owner-checked UPDATE that frees it: two one-row commits"}
	url := postgresDatabase(pg, "fenced minimum")
	fm.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("postgres: %v", err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS fenced (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
			t.Fatalf("postgres: %v", err)
		}
		made := map[string]bool{}
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if !made[key] {
					if _, err := conn.Exec(ctx, `INSERT INTO fenced VALUES ($1, '', 0, '-infinity') ON CONFLICT DO NOTHING`, key); err != nil {
						return nil, err
					}
					made[key] = true
				}
				owner := rand.Text()
				var token int64
				err := conn.QueryRow(ctx, `UPDATE fenced SET owner = $2, token = token + 1, expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE name = $1 AND (owner = '' OR expires_at <= clock_timestamp()) RETURNING token`, key, owner, ttl.Milliseconds()).Scan(&token)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil, errors.New("fenced minimum: lock held")
				}
				if err != nil {
					return nil, err
				}
				return func() error {
					_, err := conn.Exec(context.Background(), `UPDATE fenced SET owner = '' WHERE name = $1 AND owner = $2`, key, owner)
					return err
				}, nil
			},
			close: func() { _ = conn.Close(context.Background()) },
		}
	}
	return fm
}

// postgresDatabase makes a database of its own for the workers of the
// library name, and returns its URL. At each NOTIFY, PostgreSQL signals
// every backend that LISTENs in the same database, whatever its channel
// (those in other databases only when they fall far behind): in one
// database, each hand-off of one library would also pay for the
// listening connections of the others' workers, which B keeps open
// through every round.
func postgresDatabase(pg *testenv.Postgres, name string) string {
	db := "bench_" + strings.NewReplacer("-", "_", ":", "", " ", "_").Replace(name)
	pg.Exec("CREATE DATABASE " + pgx.Identifier{db}.Sanitize())
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pg.User, pg.Addr, db)
}

// postgresRing is the least a hand-off by NOTIFY does on PostgreSQL, in
// raw pgx calls: the workers pass one turn around a ring, in the order
// they were opened. Each worker LISTENs on a channel of its own, on a
// connection of its own read by a goroutine of its own (as a pglock
// Driver's listener is), and its lock waits for a message there; its
// unlock is one statement on a second connection that commits a change
// of a row (the grant) and sends pg_notify on the next worker's channel.
// No owner, no token, no queue, no renewal, no check: the next worker is
// fixed. It is right only while every worker opened keeps taking its
// turns, as in B, where all 8 run (a turn that reaches a worker that
// stopped waits for it); a turn passed at a round's end is taken at the
// next round's start.
func postgresRing(pg *testenv.Postgres) *lib {
	ring := &lib{backend: "postgres", name: "reference: NOTIFY ring", role: handoff,
		how: "not a library: 8 workers pass a turn around a ring; unlock = one statement that updates a row and sends pg_notify on the next worker's channel, which its listening connection alone waits on"}
	var (
		mu     sync.Mutex
		turns  []chan struct{} // worker i's turn, as its listener received it
		prefix = "ring_" + strings.ToLower(rand.Text()[:12])
		url    = postgresDatabase(pg, "notify ring")
	)
	ring.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		listen, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("postgres: %v", err)
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("postgres: %v", err)
		}
		mu.Lock()
		i := len(turns)
		turn := make(chan struct{}, 1)
		turns = append(turns, turn)
		mu.Unlock()
		// Workers are opened one after another: no two CREATEs race.
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS notify_ring (name text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
			t.Fatalf("postgres: %v", err)
		}
		if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{fmt.Sprintf("%s_%d", prefix, i)}.Sanitize()); err != nil {
			t.Fatalf("postgres: %v", err)
		}
		if i == 0 {
			turn <- struct{}{} // the first worker opened starts with the turn
		}
		lctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := listen.WaitForNotification(lctx); err != nil {
					return
				}
				select { // one turn in the ring: never more than one waits here
				case turn <- struct{}{}:
				case <-lctx.Done():
					return
				}
			}
		}()
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				select {
				case <-turn:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return func() error {
					mu.Lock()
					next := fmt.Sprintf("%s_%d", prefix, (i+1)%len(turns))
					mu.Unlock()
					_, err := conn.Exec(context.Background(), `WITH u AS (
	INSERT INTO notify_ring AS r VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET n = r.n + 1 RETURNING n
)
SELECT pg_notify($2, n::text) FROM u`, key, next)
					return err
				}, nil
			},
			close: func() {
				stop()
				<-done
				_ = listen.Close(context.Background())
				_ = conn.Close(context.Background())
			},
		}
	}
	return ring
}

func mariadbLibs(m *testenv.MariaDB) []*lib {
	// "dlock" is the plain mode (the name the plain-mode goals and the
	// -million list use); "dlock-fair" the fair one.
	dl := func(name string, fair bool, how string) *lib {
		l := &lib{backend: "mariadb", name: name, role: ours, how: how}
		l.open = func(t testing.TB, ttl time.Duration) worker {
			return dlockWorker(l, openDlock(t, m.URL(testenv.MariaDBUser, testenv.MariaDBPassword, m.Addr), ttl), fair, nil)
		}
		return l
	}
	fl := &lib{backend: "mariadb", name: "floor: 2 statements", role: floor, how: "two DO 1 on one database/sql connection"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		db, err := sql.Open("mysql", m.DSN(testenv.MariaDBUser, testenv.MariaDBPassword))
		if err != nil {
			t.Fatalf("mariadb: %v", err)
		}
		db.SetMaxOpenConns(1)
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if _, err := db.ExecContext(ctx, "DO 1"); err != nil {
					return nil, err
				}
				return func() error { _, err := db.ExecContext(context.Background(), "DO 1"); return err }, nil
			},
			close: func() { _ = db.Close() },
		}
	}
	return []*lib{
		dl("dlock", false, "backend/mysqllock (an arrival may take a free lock)"),
		dl("dlock-fair", true, "backend/mysqllock, dlock.WithFair() (nobody passes a live waiter; the release hands the lock on)"),
		fl, mariadbFenced(m),
	}
}

// mariadbFenced is postgresFenced on MariaDB: two one-row commits, each a
// prepared statement on one database/sql connection (as mysqllock sends
// its statements); the lock's token comes back in the OK packet, through
// LAST_INSERT_ID(expr).
func mariadbFenced(m *testenv.MariaDB) *lib {
	fm := &lib{backend: "mariadb", name: "reference: fenced minimum", role: reference,
		how: "not a library: a row per name, made once; lock = a prepared UPDATE that takes a free or expired row and sets its token + 1 (returned by LAST_INSERT_ID), unlock = an owner-checked prepared UPDATE that frees it: two one-row commits"}
	fm.open = func(t testing.TB, ttl time.Duration) worker {
		db, err := sql.Open("mysql", m.DSN(testenv.MariaDBUser, testenv.MariaDBPassword))
		if err != nil {
			t.Fatalf("mariadb: %v", err)
		}
		db.SetMaxOpenConns(1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		prepare := func(q string) *sql.Stmt {
			s, err := db.PrepareContext(ctx, q)
			if err != nil {
				t.Fatalf("mariadb: %v", err)
			}
			return s
		}
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS fenced (name VARBINARY(255) PRIMARY KEY, owner VARBINARY(64) NOT NULL,
token BIGINT UNSIGNED NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`); err != nil {
			t.Fatalf("mariadb: %v", err)
		}
		mk := prepare(`INSERT IGNORE INTO fenced VALUES (?, '', 0, '1970-01-01')`)
		take := prepare(`UPDATE fenced SET owner = ?, token = LAST_INSERT_ID(token + 1), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND (owner = '' OR expires_at <= UTC_TIMESTAMP(6))`)
		free := prepare(`UPDATE fenced SET owner = '' WHERE name = ? AND owner = ?`)
		made := map[string]bool{}
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if !made[key] {
					if _, err := mk.ExecContext(ctx, key); err != nil {
						return nil, err
					}
					made[key] = true
				}
				owner := rand.Text()
				res, err := take.ExecContext(ctx, owner, ttl.Microseconds(), key)
				if err != nil {
					return nil, err
				}
				if n, err := res.RowsAffected(); err != nil || n == 0 {
					return nil, errors.New("fenced minimum: lock held")
				}
				if token, err := res.LastInsertId(); err != nil || token == 0 {
					return nil, fmt.Errorf("fenced minimum: no token (%v)", err)
				}
				return func() error { _, err := free.ExecContext(context.Background(), key, owner); return err }, nil
			},
			close: func() {
				for _, s := range []*sql.Stmt{mk, take, free} {
					_ = s.Close()
				}
				_ = db.Close()
			},
		}
	}
	return fm
}
