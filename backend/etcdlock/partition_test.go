package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/internal/testenv"
)

// peerCluster is a 3-member embedded cluster whose members reach each
// other only through testenv.EtcdPeers, so that a test can cut one member
// off from the two others while its clients still reach it.
type peerCluster struct {
	members []*etcdlock.Embedded
	peers   *testenv.EtcdPeers
}

func startPeerCluster(t *testing.T) *peerCluster {
	t.Helper()
	const n = 3
	peers := testenv.NewEtcdPeers(t, n, etcdlock.EmbeddedClusterToken)
	cluster := map[string]string{}
	cfgs := make([]etcdlock.EmbedConfig, n)
	dir := t.TempDir()
	for i := range cfgs {
		name := fmt.Sprintf("member%d", i)
		cluster[name] = peers.AdvertiseAddr(i)
		cfgs[i] = etcdlock.EmbedConfig{
			Dir: filepath.Join(dir, name), Name: name, Cluster: cluster,
			PeerAddr: peers.AdvertiseAddr(i), PeerListenAddr: peers.ListenAddr(i),
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, err := etcdlock.StartEmbeddedMembers(ctx, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	c := &peerCluster{members: ms, peers: peers}
	t.Cleanup(func() {
		for _, m := range ms {
			_ = m.Close()
		}
	})
	// The peer network tells members apart by ID: it must know them.
	for i, m := range c.members {
		if m.MemberID() != peers.MemberID(i) {
			t.Fatalf("member %d has ID %x, the peer network expects %x", i, m.MemberID(), peers.MemberID(i))
		}
	}
	return c
}

// leader returns the index of the raft leader, waiting for one.
func (c *peerCluster) leader(t *testing.T) int {
	t.Helper()
	leader := -1
	testenv.Eventually(t, 30*time.Second, "a raft leader", func() error {
		for i, m := range c.members {
			if m.IsLeader() {
				leader = i
				return nil
			}
		}
		return errors.New("none")
	})
	return leader
}

// endpoints returns the client addresses of the members other than cut.
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
