package etcdlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// deployment is a set of etcd members, each in a process of its own, that
// a test can stop and start again.
type deployment struct {
	members []*testenv.Etcd
	compat  string // the compat parameter of its drivers, if any
}

func (d *deployment) endpoints() []string {
	var eps []string
	for _, m := range d.members {
		eps = append(eps, m.Endpoints()...)
	}
	return eps
}

func (d *deployment) url() string {
	u := "etcd://" + strings.Join(d.endpoints(), ",")
	if d.compat != "" {
		u += "?compat=" + d.compat
	}
	return u
}

// open connects a driver of its own to addrs, or to the members.
func (d *deployment) open(ctx context.Context, addrs []string) (driver.Driver, error) {
	if addrs == nil {
		addrs = d.endpoints()
	}
	return etcdlock.Connect(ctx, etcdlock.Config{Endpoints: addrs, Prefix: etcdlock.DefaultPrefix, Compat: d.compat, DialTimeout: 10 * time.Second})
}

// stop stops member i (SIGTERM); its data stays.
func (d *deployment) stop(t testing.TB, i int) {
	t.Helper()
	d.members[i].Stop()
}

// start starts the given (stopped) members again, on their directories and
// ports, concurrently: a cluster member waits for a quorum.
func (d *deployment) start(t testing.TB, which ...int) {
	t.Helper()
	var ms []*testenv.Etcd
	for _, i := range which {
		ms = append(ms, d.members[i])
	}
	if err := testenv.StartEtcdAgain(ms...); err != nil {
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

func singleNode(t testing.TB) *deployment {
	t.Helper()
	return &deployment{members: []*testenv.Etcd{startServer(t)}}
}

func threeMembers(t testing.TB) *deployment {
	t.Helper()
	return &deployment{members: testenv.StartEtcdCluster(t, 3)}
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

// In compat=etcdctl, dlock keeps its whole contract among its own
// clients: only the keys are named otherwise.
func TestConformanceEtcdctlCompat(t *testing.T) {
	d := singleNode(t)
	d.compat = etcdlock.CompatEtcdctl
	dlocktest.Run(t, harness(d))
}

func TestConformanceThreeMembers(t *testing.T) {
	h := harness(threeMembers(t))
	// Renewals go through the leader; on a loaded machine a cluster of
	// three can miss heartbeats and elect a new leader, which takes a
	// second or two. A lease must outlast that to be kept.
	h.TTL = 5 * time.Second
	dlocktest.Run(t, h)
}
