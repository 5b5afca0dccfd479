package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// startServer starts a single-member embedded etcd for one test.
func startServer(t testing.TB) *etcdlock.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := etcdlock.StartEmbedded(ctx, etcdlock.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
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
	c := dlock.New(etcdlock.New(newClient(t, endpoints)), opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
