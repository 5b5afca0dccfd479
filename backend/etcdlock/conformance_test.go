package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
)

// deployment is a set of embedded etcd members that a test can restart.
type deployment struct {
	mu      sync.Mutex
	members []*etcdlock.Embedded
}

func (d *deployment) endpoints() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var eps []string
	for _, m := range d.members {
		eps = append(eps, m.Endpoints()...)
	}
	return eps
}

func (d *deployment) url() string { return "etcd://" + strings.Join(d.endpoints(), ",") }

// open connects a driver of its own to addrs, or to the members.
func (d *deployment) open(ctx context.Context, addrs []string) (driver.Driver, error) {
	if addrs == nil {
		addrs = d.endpoints()
	}
	return etcdlock.Connect(ctx, etcdlock.Config{Endpoints: addrs, Prefix: etcdlock.DefaultPrefix, DialTimeout: 10 * time.Second})
}

// stop stops member i.
func (d *deployment) stop(t testing.TB, i int) {
	t.Helper()
	d.mu.Lock()
	m := d.members[i]
	d.mu.Unlock()
	_ = m.Close()
}

// start starts the given (stopped) members again, on their directories and
// ports, concurrently: a cluster member waits for a quorum.
func (d *deployment) start(t testing.TB, which ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(which))
	var wg sync.WaitGroup
	for j, i := range which {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.mu.Lock()
			cfg := d.members[i].Config()
			d.mu.Unlock()
			m, err := etcdlock.StartEmbedded(ctx, cfg)
			if err != nil {
				errs[j] = err
				return
			}
			d.mu.Lock()
			d.members[i] = m
			d.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// restart stops every member and starts them again.
func (d *deployment) restart(t testing.TB) {
	t.Helper()
	all := make([]int, len(d.members))
	for i := range all {
		all[i] = i
		d.stop(t, i)
	}
	d.start(t, all...)
}

func (d *deployment) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.members {
		_ = m.Close()
	}
}

func singleNode(t testing.TB) *deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := etcdlock.StartEmbedded(ctx, etcdlock.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{members: []*etcdlock.Embedded{m}}
	t.Cleanup(d.close)
	return d
}

func threeMembers(t testing.TB) *deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, err := etcdlock.StartEmbeddedCluster(ctx, t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{members: ms}
	t.Cleanup(d.close)
	return d
}

func harness(d *deployment) dlocktest.Harness {
	return dlocktest.Harness{
		Open:      d.open,
		Endpoints: d.endpoints(),
		URL:       d.url(),
		Restart:   d.restart,
		Fair:      true,
	}
}

func TestConformanceSingleNode(t *testing.T) {
	dlocktest.Run(t, harness(singleNode(t)))
}

func TestConformanceThreeMembers(t *testing.T) {
	h := harness(threeMembers(t))
	// Renewals go through the leader; on a loaded machine a cluster of
	// three can miss heartbeats and elect a new leader, which takes a
	// second or two. A lease must outlast that to be kept.
	h.TTL = 5 * time.Second
	dlocktest.Run(t, h)
}
