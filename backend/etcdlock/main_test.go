package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// startServer starts a single-member etcd, in a process of its own, for
// one test.
func startServer(t testing.TB) *testenv.Etcd {
	t.Helper()
	return testenv.StartEtcd(t, testenv.EtcdConfig{})
}

// newClient returns a raw etcd client of its own for endpoints.
func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newLocker returns a dlock client with its own etcd connection.
func newLocker(t testing.TB, endpoints []string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	d, err := etcdlock.New(newClient(t, endpoints))
	if err != nil {
		t.Fatal(err)
	}
	c := dlock.New(d, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// memberStatus returns the ID of the member serving endpoint and the ID of
// the leader it knows of (0 for none).
func memberStatus(t testing.TB, cli *clientv3.Client, endpoint string) (id, leader uint64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

// leaderOf returns the index of the raft leader among members, waiting
// for one.
func leaderOf(t testing.TB, members []*testenv.Etcd) int {
	t.Helper()
	var eps []string
	for _, m := range members {
		eps = append(eps, m.Endpoints()...)
	}
	cli := newClient(t, eps)
	leader := -1
	testenv.Eventually(t, 30*time.Second, "a raft leader", func() error {
		for i, ep := range eps {
			id, lead, err := memberStatus(t, cli, ep)
			if err == nil && id == lead {
				leader = i
				return nil
			}
		}
		return errors.New("no member reports itself leader")
	})
	return leader
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
