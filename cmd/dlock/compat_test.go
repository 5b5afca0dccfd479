package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/internal/testenv"
)

// run, inspect, list and break work in compat=setnx, beside a foreign
// SET NX PX holder (what redis-py's Lock, redsync and bsm/redislock do).
func TestRunInspectListAndBreakInSetNXCompatMode(t *testing.T) {
	srv := testenv.StartRedis(t)
	env := cleanEnv("DLOCK_BACKEND=redis://" + srv.Addr + "?compat=setnx")
	ctx := testenv.Context(t, time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	const name = "jobs:nightly"

	// A foreign holder: dlock sees it, and does not take the lock.
	if err := rdb.SetNX(ctx, name, "9f2c4e7a1b3d", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	seeAndBreakForeignHolder(t, env, name, "jobs:", "held", "holder unknown", "expires in")
	if n, _ := rdb.Exists(ctx, name).Result(); n != 0 {
		t.Errorf("the key %s is still there after break", name)
	}

	// dlock's holder: the key itself is taken, so a foreign SET NX fails.
	holdAndBreak(t, env, name, func() {
		if ok, err := rdb.SetNX(ctx, name, "foreign", 30*time.Second).Result(); err != nil || ok {
			t.Errorf("a foreign SET NX while dlock run holds %s: %v, %v; want refused", name, ok, err)
		}
	})
}

// seeAndBreakForeignHolder checks the CLI beside a foreign holder of name:
// inspect shows every one of want, run --no-wait is refused, list prefix
// shows the name, and break succeeds.
func seeAndBreakForeignHolder(t *testing.T, env []string, name, prefix string, want ...string) {
	t.Helper()
	r := runDlock(t, env, "inspect", name)
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("inspect of a foreign holder lacks %q:\n%s", w, r)
		}
	}
	if r = runDlock(t, env, "run", "--no-wait", name, "--", "true"); r.code != exitNotAcquired {
		t.Errorf("run --no-wait while a foreign client holds %s: %s; want status %d", name, r, exitNotAcquired)
	}
	if r = runDlock(t, env, "list", prefix); r.code != 0 || !strings.Contains(r.stdout, name) {
		t.Errorf("list %s: %s; want %s", prefix, r, name)
	}
	if r = runDlock(t, env, "break", name); r.code != 0 {
		t.Fatalf("break of the foreign holder: %s", r)
	}
}

// holdAndBreak starts dlock run holding name, with a token, runs seen (the
// foreign side's view of dlock's holder), breaks the lock and checks that
// the holder exits with its lease lost.
func holdAndBreak(t *testing.T, env []string, name string, seen func()) {
	t.Helper()
	holder := startDlock(t, env, "run", name, "--", "sleep", "120")
	if j := waitHeld(t, env, name, holder.pid()); j.Token == 0 {
		t.Errorf("dlock's holder has no token: %+v", j)
	}
	seen()
	if r := runDlock(t, env, "break", name); r.code != 0 {
		t.Fatalf("break: %s", r)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
}

// run, inspect, list and break work in compat=etcdctl, beside etcdctl
// lock: dlock shows its holder and waiters, named by their lease and key,
// and its own holder's key makes etcdctl lock wait.
func TestRunInspectListAndBreakInEtcdctlCompatMode(t *testing.T) {
	srv := testenv.StartEtcd(t, testenv.EtcdConfig{})
	env := cleanEnv("DLOCK_BACKEND=etcd://" + srv.Endpoints()[0] + "?compat=etcdctl")
	const name = "jobs/nightly"

	// A foreign holder: dlock sees it, and does not take the lock.
	lines := testenv.StartLines(t, srv.Etcdctl(t, "lock", "--ttl=30", name))
	if !lines.Scan() {
		t.Fatal("etcdctl lock printed no key")
	}
	key := lines.Text()
	r := runDlock(t, env, "inspect", name)
	for _, want := range []string{"held", "not dlock", key, "expires in"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect of an etcdctl holder lacks %q:\n%s", want, r)
		}
	}
	if r = runDlock(t, env, "run", "--no-wait", name, "--", "true"); r.code != exitNotAcquired {
		t.Errorf("run --no-wait while etcdctl holds %s: %s; want status %d", name, r, exitNotAcquired)
	}
	if r = runDlock(t, env, "list", "jobs/"); r.code != 0 || !strings.Contains(r.stdout, name) {
		t.Errorf("list jobs/: %s; want %s", r, name)
	}
	if r = runDlock(t, env, "break", name); r.code != 0 {
		t.Fatalf("break of the etcdctl holder: %s", r)
	}
	if out, err := srv.Etcdctl(t, "get", "--prefix", "--keys-only", name+"/").Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("keys under %s/ after break: %q, %v; want none", name, out, err)
	}

	// dlock's holder: etcdctl lock queues behind it, and runs once the
	// holder is broken.
	holder := startDlock(t, env, "run", name, "--", "sleep", "120")
	if j := waitHeld(t, env, name, holder.pid()); j.Token == 0 {
		t.Errorf("dlock's holder has no token: %+v", j)
	}
	waiter := testenv.StartLines(t, srv.Etcdctl(t, "lock", name, "--", "echo", "RAN"))
	waitWaiters(t, env, name, 1)
	if w := lockState(t, env, name).Waiters[0]; !strings.Contains(w.Note, "not dlock") {
		t.Errorf("the etcdctl waiter is shown as %+v", w)
	}
	if r = runDlock(t, env, "break", name); r.code != 0 {
		t.Fatalf("break: %s", r)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
	if !waiter.Scan() || waiter.Text() != "RAN" {
		t.Errorf("etcdctl lock after the break: %q; want RAN", waiter.Text())
	}
}

// run, inspect, list and break work in compat=kazoo, beside a foreign
// holder's node as kazoo's Lock makes it (<uuid4 hex>__lock__<sequence>,
// ephemeral sequential), and dlock's holder makes a node that kazoo
// recognises.
func TestRunInspectListAndBreakInKazooCompatMode(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	env := cleanEnv("DLOCK_BACKEND=zk://" + strings.Join(z.Addrs(), ",") + "?compat=kazoo&session_timeout=4s")
	conn, _, err := zk.Connect(z.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const name = "/jobs/nightly"
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{"/jobs", name} {
		if _, err := conn.Create(p, nil, 0, acl); err != nil {
			t.Fatal(err)
		}
	}

	// A foreign holder: dlock sees it, and does not take the lock.
	if _, err := conn.Create(name+"/4f0c9e2ab7d14c3f9a51e6b2d8c07a13__lock__", []byte("billing-7"), zk.FlagEphemeralSequential, acl); err != nil {
		t.Fatal(err)
	}
	seeAndBreakForeignHolder(t, env, name, "/jobs/", "held", "kazoo contender", "billing-7")
	if kids, _, err := conn.Children(name); err != nil || len(kids) != 0 {
		t.Errorf("contenders after break: %q, %v; want none", kids, err)
	}

	// dlock's holder: its node is one kazoo's Lock counts as a contender.
	kazooNode := regexp.MustCompile(`^[0-9a-f]{32}__lock__\d{10}$`)
	holdAndBreak(t, env, name, func() {
		if kids, _, err := conn.Children(name); err != nil || len(kids) != 1 || !kazooNode.MatchString(kids[0]) {
			t.Errorf("dlock's holder's node: %q, %v; want one <32 hex>__lock__<10 digits>", kids, err)
		}
	})
}
