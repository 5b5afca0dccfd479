package etcdserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config configures an etcd server run inside this process.
type Config struct {
	// Dir holds the server's data (write-ahead log and database). A server
	// started again on the same Dir continues where it stopped, with the
	// same revisions, so fencing tokens keep increasing.
	Dir string
	// ClientAddr is the host:port clients connect to; "" picks a free port
	// on 127.0.0.1.
	ClientAddr string
	// PeerAddr is the host:port other members connect to; "" picks a free
	// port on 127.0.0.1.
	PeerAddr string
	// PeerListenAddr is where the server listens for other members when
	// that is not PeerAddr, the address it advertises (a proxy stands in
	// between); "" means PeerAddr.
	PeerListenAddr string
	// Logger receives the server's log; nil discards it.
	Logger *zap.Logger

	// Heartbeat and ElectionTimeout are raft's heartbeat interval and
	// election timeout; 0 keeps etcd's defaults (100 ms, 1 s). etcd grants
	// no lease shorter than 1.5 election timeouts.
	Heartbeat, ElectionTimeout time.Duration

	// RootPassword, when set, turns on etcd's authentication: the server
	// refuses clients that do not log in, and user "root" logs in with
	// this password (created, and authentication enabled, at the first
	// start; later starts on the same Dir must give the same password).
	// URL then carries the credential. Only for a single-member server.
	RootPassword string

	// Name is the member's name; "" means "default".
	Name string
	// Cluster maps the name of every member of a multi-member cluster
	// (this one included) to its PeerAddr. nil starts a single-member
	// cluster. See StartCluster.
	Cluster map[string]string
	// ClusterToken is the initial cluster token of a multi-member
	// cluster; "" means the package's ClusterToken. With the peer URLs it
	// determines the members' IDs.
	ClusterToken string
}

// ClusterToken is the default initial cluster token of the multi-member
// clusters Start creates.
const ClusterToken = "dlock-embedded"

// Server is an etcd server running inside this process.
type Server struct {
	cfg  Config
	etcd *embed.Etcd

	closeOnce sync.Once
}

// Start starts an etcd server in this process and returns when it
// serves clients (for a member of a multi-member cluster: when a quorum of
// members has started, so start them concurrently), or with an error when
// ctx ends first.
//
// The server keeps etcd's default timing (100 ms heartbeat, 1 s election
// timeout; the shortest lease is then 2 s), compacts history older than an
// hour, and logs nothing unless cfg.Logger is set.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdserver: Config.Dir is empty")
	}
	// Ports this function picks are free a moment before etcd binds them;
	// one that something took meanwhile (an outgoing connection's local
	// port, from the same range) fails the start before etcd writes
	// anything, so it starts again on others.
	pickClient, pickPeer := cfg.ClientAddr == "", cfg.PeerAddr == ""
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		var err error
		if pickClient {
			cfg.ClientAddr = ""
		}
		if pickPeer {
			cfg.PeerAddr = ""
		}
		if cfg.ClientAddr, err = pickAddr(cfg.ClientAddr); err != nil {
			return nil, err
		}
		if cfg.PeerAddr, err = pickAddr(cfg.PeerAddr); err != nil {
			return nil, err
		}
		e, err = embed.StartEtcd(embedConfig(&cfg))
		if err == nil {
			break
		}
		if (pickClient || pickPeer) && errors.Is(err, syscall.EADDRINUSE) && attempt < startAttempts {
			continue
		}
		return nil, fmt.Errorf("etcdserver: start etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		if cfg.RootPassword != "" {
			if err := enableAuth(ctx, cfg); err != nil {
				e.Close()
				return nil, err
			}
		}
		return &Server{cfg: cfg, etcd: e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd in %s: %w", cfg.Dir, err)
	case <-e.Server.StopNotify():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd in %s stopped while starting", cfg.Dir)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd in %s did not start: %w", cfg.Dir, ctx.Err())
	}
}

// startAttempts bounds Start's tries on ports it picked itself.
const startAttempts = 3

// pickAddr is addrOrFree; a test replaces it.
var pickAddr = addrOrFree

// embedConfig is etcd's configuration for cfg, whose addresses are set.
func embedConfig(cfg *Config) *embed.Config {
	if cfg.Name == "" {
		cfg.Name = embed.DefaultName
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	ec.EnableGRPCGateway = false
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	// bcrypt's lowest cost (4, against etcd's default 10): the stretching
	// protects guessable passwords, and RootPassword is random; at cost 10
	// every client's login costs the server ~50 ms of CPU, and sixteen
	// `dlock run` logging in at once on a busy machine time out.
	ec.BcryptCost = 4
	cu := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	pu := url.URL{Scheme: "http", Host: cfg.PeerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	if cfg.PeerListenAddr != "" {
		ec.ListenPeerUrls = []url.URL{{Scheme: "http", Host: cfg.PeerListenAddr}}
	}
	if cfg.Heartbeat > 0 {
		ec.TickMs = uint(cfg.Heartbeat.Milliseconds())
	}
	if cfg.ElectionTimeout > 0 {
		ec.ElectionMs = uint(cfg.ElectionTimeout.Milliseconds())
	}
	if cfg.Cluster == nil {
		ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	} else {
		names := make([]string, 0, len(cfg.Cluster))
		for n := range cfg.Cluster {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, 0, len(names))
		for _, n := range names {
			parts = append(parts, n+"=http://"+cfg.Cluster[n])
		}
		ec.InitialCluster = strings.Join(parts, ",")
		ec.InitialClusterToken = cmp.Or(cfg.ClusterToken, ClusterToken)
	}

	return ec
}

// StartCluster starts an n-member cluster in this process, on free
// loopback ports, with member i's data in dir/member<i>.
func StartCluster(ctx context.Context, dir string, n int, logger *zap.Logger) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdserver: a cluster needs at least one member, not %d", n)
	}
	cfgs := make([]Config, n)
	cluster := map[string]string{}
	for i := range cfgs {
		peer, err := addrOrFree("")
		if err != nil {
			return nil, err
		}
		client, err := addrOrFree("")
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("member%d", i)
		cfgs[i] = Config{Dir: filepath.Join(dir, name), ClientAddr: client, PeerAddr: peer, Logger: logger, Name: name, Cluster: cluster}
		cluster[name] = peer
	}
	return StartMembers(ctx, cfgs)
}

// StartMembers starts the members of one cluster, each with its
// own configuration, concurrently (a member waits for a quorum to start),
// and returns when all serve; if any fails to start, it stops the others.
func StartMembers(ctx context.Context, cfgs []Config) ([]*Server, error) {
	members := make([]*Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = Start(ctx, cfgs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range members {
			if m != nil {
				_ = m.Close()
			}
		}
		return nil, err
	}
	return members, nil
}

// addrOrFree returns addr, or a free port on 127.0.0.1 if addr is "".
func addrOrFree(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("etcdserver: no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

const (
	// authSetupTimeout bounds enabling authentication on the server just
	// started: a few writes and bcrypt runs, which take seconds at most
	// even under the race detector.
	authSetupTimeout = 30 * time.Second
	// localDialTimeout bounds the connection to the server in this
	// process, on loopback.
	localDialTimeout = 5 * time.Second
)

// enableAuth makes root's password cfg.RootPassword and enables
// authentication, unless it is enabled already; then it checks that root
// logs in with that password.
func enableAuth(ctx context.Context, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, authSetupTimeout)
	defer cancel()
	fail := func(err error) error {
		return fmt.Errorf("etcdserver: enable authentication of the etcd in %s: %w", cfg.Dir, err)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{cfg.ClientAddr}, Username: "root", Password: cfg.RootPassword,
		DialTimeout: localDialTimeout, Context: ctx, Logger: zap.NewNop(),
	})
	if err != nil {
		if errors.Is(err, rpctypes.ErrAuthFailed) {
			return fail(errors.New("authentication is enabled and root's password is not the one given"))
		}
		return fail(err)
	}
	defer c.Close()
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return fail(err)
	}
	if st.Enabled {
		return nil
	}
	if _, err := c.UserAdd(ctx, "root", cfg.RootPassword); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		_, err = c.UserChangePassword(ctx, "root", cfg.RootPassword)
		if err != nil {
			return fail(err)
		}
	} else if err != nil {
		return fail(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return fail(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// URL returns the etcd:// URL of this server, for dlock.Open; with
// RootPassword set, it holds root's credential.
func (e *Server) URL() string {
	if e.cfg.RootPassword != "" {
		return "etcd://" + url.UserPassword("root", e.cfg.RootPassword).String() + "@" + e.cfg.ClientAddr
	}
	return "etcd://" + e.cfg.ClientAddr
}

// Endpoints returns the host:port clients connect to.
func (e *Server) Endpoints() []string { return []string{e.cfg.ClientAddr} }

// Config returns the configuration the server runs with, its ports
// filled in: Start(ctx, e.Config()) restarts it after Close.
func (e *Server) Config() Config { return e.cfg }

// IsLeader reports whether this member is the raft leader of its cluster.
func (e *Server) IsLeader() bool {
	return e.etcd.Server.Leader() == e.etcd.Server.MemberID()
}

// MemberID returns this member's ID in its cluster.
func (e *Server) MemberID() uint64 { return uint64(e.etcd.Server.MemberID()) }

// Close stops the server and waits until it has stopped. Its data stays in
// Dir.
func (e *Server) Close() error {
	e.closeOnce.Do(e.etcd.Close)
	return nil
}
