package etcdlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// peerCluster is a 3-member cluster, each member in a process of its own,
// whose members reach each other only through testenv.EtcdPeers, so that a
// test can cut one member off from the two others while its clients still
// reach it.
type peerCluster struct {
	members []*testenv.Etcd
	peers   *testenv.EtcdPeers
}

// peerClusterToken is the cluster's initial token: with the advertised peer
// addresses, it determines the member IDs that EtcdPeers tells apart.
const peerClusterToken = "dlock-partition-test"

func startPeerCluster(t *testing.T) *peerCluster {
	t.Helper()
	const n = 3
	peers := testenv.NewEtcdPeers(t, n, peerClusterToken)
	cluster := map[string]string{}
	cfgs := make([]testenv.EtcdConfig, n)
	for i := range cfgs {
		name := fmt.Sprintf("member%d", i)
		cluster[name] = peers.AdvertiseAddr(i)
		cfgs[i] = testenv.EtcdConfig{
			Name: name, Cluster: cluster, ClusterToken: peerClusterToken,
			PeerAddr: peers.AdvertiseAddr(i), PeerListenAddr: peers.ListenAddr(i),
		}
	}
	c := &peerCluster{members: testenv.StartEtcdMembers(t, cfgs), peers: peers}
	// The peer network tells members apart by ID: it must know them.
	cli := newClient(t, c.endpointsBut(-1))
	for i, m := range c.members {
		id, _, err := memberStatus(t, cli, m.Endpoints()[0])
		if err != nil {
			t.Fatalf("status of member %d: %v", i, err)
		}
		if id != peers.MemberID(i) {
			t.Fatalf("member %d has ID %x, the peer network expects %x", i, id, peers.MemberID(i))
		}
	}
	return c
}

// leader returns the index of the raft leader, waiting for one.
func (c *peerCluster) leader(t *testing.T) int {
	t.Helper()
	return leaderOf(t, c.members)
}

// endpointsBut returns the client addresses of the members other than
// cut.
func (c *peerCluster) endpointsBut(cut int) []string {
	var eps []string
	for i, m := range c.members {
		if i != cut {
			eps = append(eps, m.Endpoints()...)
		}
	}
	return eps
}

// TestFollowerCutFromLeaderLosesLeaseBeforeNextGrant cuts off, from the
// two other members of a 3-member cluster, the follower that the holder of
// a lock talks to (and only to), while the holder still reaches it. The
// holder can no longer renew (a renewal needs the leader), the leader lets
// its lease expire, and a client of the majority that waits on the lock is
// granted it. The holder's Done must close before that grant.
func TestFollowerCutFromLeaderLosesLeaseBeforeNextGrant(t *testing.T) {
	c := startPeerCluster(t)
	leader := c.leader(t)
	cut := (leader + 1) % len(c.members)
	testCutMember(t, c, cut)
}

// TestLeaderCutFromFollowersLosesLeaseBeforeNextGrant is the same with the
// leader cut off: the holder talks only to the old leader, the two
// followers elect a new one, which lets the holder's lease expire and
// grants the lock to the majority's waiter.
func TestLeaderCutFromFollowersLosesLeaseBeforeNextGrant(t *testing.T) {
	c := startPeerCluster(t)
	testCutMember(t, c, c.leader(t))
}

func testCutMember(t *testing.T, c *peerCluster, cut int) {
	const ttl = 3 * time.Second
	ctx := testContext(t)
	name := "member-cut"
	holder := newLocker(t, c.members[cut].Endpoints(), dlock.WithTTL(ttl))
	majority := c.endpointsBut(cut)
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	type grant struct {
		l   *dlock.Lease
		err error
		at  time.Time
	}
	granted := make(chan grant, 1)
	waiter := newLocker(t, majority, dlock.WithTTL(ttl))
	go func() {
		l2, err := waiter.Mutex(name).Lock(ctx)
		granted <- grant{l2, err, time.Now()}
	}()
	waitWaiters(t, newLocker(t, majority), name, 1)

	c.peers.Isolate(cut)
	defer c.peers.Rejoin(cut)
	start := time.Now()
	lostAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-l.Done():
			lostAt <- time.Now()
		case <-ctx.Done():
		}
	}()
	var lost time.Time
	var g grant
	timeout := time.After(45 * time.Second)
	for lost.IsZero() || g.at.IsZero() {
		select {
		case lost = <-lostAt:
		case g = <-granted:
			if g.err != nil {
				t.Fatalf("the majority's Lock, %v after the cut: %v", g.at.Sub(start).Round(time.Millisecond), g.err)
			}
			granted = nil
			select {
			case <-l.Done():
			default:
				t.Fatalf("the majority was granted the lock %v after the cut while the holder's Done was still open: two holders",
					g.at.Sub(start).Round(time.Millisecond))
			}
		case <-timeout:
			t.Fatalf("45s after the cut: Done closed %v, majority granted %v", !lost.IsZero(), !g.at.IsZero())
		}
	}
	t.Logf("member %d cut: the holder's Done closed after %v, the majority was granted after %v",
		cut, lost.Sub(start).Round(time.Millisecond), g.at.Sub(start).Round(time.Millisecond))
	if !lost.Before(g.at) {
		t.Errorf("the holder's Done closed after the majority was granted the lock: two holders")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("the holder's Err = %v, want ErrLeaseLost", l.Err())
	}
	if g.l.Token() <= l.Token() {
		t.Errorf("token of the majority's grant %d, want > %d", g.l.Token(), l.Token())
	}
	if err := g.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
