package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// Fault is a kind of fault the harness injects, again and again, during a
// run. Each fault ends with a heal, after which grants must resume.
type Fault string

// The faults.
const (
	// None: no faults; any two overlapping holds are a violation.
	None Fault = "none"
	// Pause freezes a lock-holding client process (SIGSTOP) for longer
	// than its TTL, then resumes it: the process sleeps through its lease
	// expiry, as in a long GC pause.
	Pause Fault = "pause"
	// Kill kills a lock-holding client process (SIGKILL) and starts a new
	// one in its place.
	Kill Fault = "kill"
	// Net cuts a lock-holding client off from the backend through the
	// client's own proxy: alternately a partition (traffic frozen for
	// longer than the TTL) and dropped connections with added latency.
	Net Fault = "net"
	// Restart kills every server of the deployment and starts it again on
	// the same data.
	Restart Fault = "restart"
	// Member stops one member of a three-node deployment (a cluster member,
	// a Redlock node) and starts it again later.
	Member Fault = "member"
	// Skew runs two client processes with wrong clocks: c0's wall clock an
	// hour ahead (SkewOffset), c1's clock at SkewRate of real time; each
	// round, one of them is made to hold the lock for SkewHold TTLs.
	Skew Fault = "skew"
	// MemberCut cuts one follower of a three-member cluster off from the
	// other members (Deploy.Isolate) while its clients still reach it, then
	// rejoins it (Deploy.Rejoin). Each client process talks to one member
	// only (client slot s to member s mod Members), and the fault is aimed
	// at a holder whose member is a follower: its renewals reach only the
	// cut member, the leader expires its lease and grants the lock to a
	// client of the majority.
	MemberCut Fault = "member-cut"
	// Evict fills the server's memory up to its limit (Deploy.Fill) while a
	// client holds the lock, then gives the memory back (Deploy.Free): what
	// the server does then depends on its maxmemory-policy (refuse writes,
	// or evict keys that have a TTL, such as a held lock).
	Evict Fault = "evict"
	// PartitionRestart cuts one node of a several-node deployment off from
	// every client (through each client's own proxies), restarts another
	// node (Deploy.StopMember, Deploy.StartMember) while the cut lasts,
	// then heals the cut: the Redlock sequence where a token must not
	// repeat.
	PartitionRestart Fault = "partition-restart"
	// BreakPartition freezes a lock holder's connections (as Net's
	// partition), breaks its lock from the harness (Client.Break) while it
	// is cut off, and heals the partition: the next holder is granted a
	// higher token, and the fence must refuse the old holder's writes.
	BreakPartition Fault = "break-partition"
)

// Workload is the primitive the client processes take: each grant a lease
// with a fencing token, checked alike (see the package documentation,
// "Workloads").
type Workload string

// The workloads.
const (
	WorkloadMutex     Workload = "mutex"      // Client.Mutex: Lock, Unlock
	WorkloadFairMutex Workload = "mutex-fair" // Client.Mutex with dlock.WithFair: Lock, Unlock
	WorkloadSemaphore Workload = "semaphore"  // Client.Semaphore(name, Config.Limit): Acquire, Unlock
	WorkloadRWMutex   Workload = "rwmutex"    // Client.RWMutex: RLock two holds in three, Lock the third
	WorkloadElection  Workload = "election"   // Client.Election: Campaign, Resign
)

// Workloads are every workload, in the order the table shows them.
var Workloads = []Workload{WorkloadMutex, WorkloadFairMutex, WorkloadSemaphore, WorkloadRWMutex, WorkloadElection}

// The clocks of the Skew fault's two client processes (see the package
// documentation for why these values).
const (
	SkewOffset = time.Hour // c0: an hour ahead, at the right rate
	SkewRate   = 0.3       // c1: 0.3 s of its clock per real second
	SkewHold   = 2         // a round's hold, in TTLs of real time
)

// ClientFaults are the faults a client can inject on its own side, without
// access to the servers (dlock verify --faults client).
var ClientFaults = []Fault{Pause, Kill, Net, BreakPartition}

// DeploymentFaults are the faults that need control of the servers: only a
// deployment the harness started (make verify) offers them.
var DeploymentFaults = []Fault{Restart, Member, MemberCut, Evict, PartitionRestart}

// proxied reports whether each client process of the fault talks to the
// servers through proxies of its own, one per endpoint.
func (f Fault) proxied() bool { return f == Net || f == PartitionRestart || f == BreakPartition }

// Deployment is a running backend under test.
type Deployment struct {
	// Endpoints are the host:port addresses clients connect to. With the
	// Net fault each client process gets its own proxy per endpoint.
	Endpoints []string
	// URL returns the URL a client process opens, given the endpoints it
	// must use (Endpoints, or its proxies in front of them).
	URL func(endpoints []string) string
	// Restart kills every server and starts it again with the same data on
	// the same endpoints (the Restart fault).
	Restart func()
	// StopMember and StartMember stop and start member i of Members (the
	// Member fault).
	Members     int
	StopMember  func(i int)
	StartMember func(i int)
	// Isolate cuts member i off from the other members, in both
	// directions, while its clients still reach it; Rejoin heals it; Leader
	// returns the member that leads now, or -1 (the MemberCut fault).
	Isolate func(i int)
	Rejoin  func(i int)
	Leader  func() int
	// Fill fills the server's memory up to the limit at which its
	// maxmemory-policy acts, and returns when it did; Free gives the memory
	// back (the Evict fault).
	Fill func()
	Free func()
	// Settled reports whether the servers are whole again after a fault
	// (nil: as soon as grants resume). The next round waits for it, so
	// that a round tests one fault, not the last one's aftermath as well:
	// a Redlock node restarted empty is whole once it is re-seeded with
	// the fence counters, and a second node restarted before that leaves
	// a majority without them, which the package refuses to grant on.
	Settled func() bool
}

// Config describes one run: a backend, a fault, and the workload's shape.
type Config struct {
	Backend string // its name in the summary table
	Fault   Fault
	Deploy  Deployment
	// Spawn returns the command that starts a client process; the harness
	// adds the environment that makes it a worker (see IsWorker). In a test
	// it re-executes the test binary; dlock verify re-executes itself.
	Spawn func() *exec.Cmd
	// Open, instead of Spawn, runs the clients as goroutines of this
	// process, each with a client from Open: for in-process backends
	// (memlock) and for checking the checkers. Only fault None applies.
	Open func(ctx context.Context) (*dlock.Client, error)

	// Workload is what the clients take (default WorkloadMutex); Limit is
	// the semaphore's permits (WorkloadSemaphore; default 3).
	Workload Workload
	Limit    int

	Clients  int           // client processes (default 4)
	Names    int           // lock names they contend for (default 1)
	TTL      time.Duration // lease length (default 2s)
	Duration time.Duration // length of the run (default 20s); a fault run ends earlier, once its last heal is judged
	HoldMin  time.Duration // holds last [HoldMin, HoldMax) (default 20ms..200ms)
	HoldMax  time.Duration
	// Bound is the stated recovery bound: after each heal a grant must come
	// within TTL + Bound (default 5s).
	Bound time.Duration
	// TokensMayReset: the backend does not keep tokens across a restart
	// (see Params.TokensMayReset).
	TokensMayReset bool
	// Allowances are the backend's documented exceptions to exclusion
	// under faults (see Allowance).
	Allowances []Allowance
	// Dir receives the merged history "history.jsonl", and under "parts"
	// each process's own history and log (a "parts" left by an earlier
	// run is removed first). Default: a new temporary directory.
	Dir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.Names <= 0 {
		c.Names = 1
	}
	if c.TTL <= 0 {
		c.TTL = 2 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.HoldMin <= 0 {
		c.HoldMin = 20 * time.Millisecond
	}
	if c.HoldMax <= c.HoldMin {
		c.HoldMax = max(10*c.HoldMin, 200*time.Millisecond)
	}
	if c.Bound <= 0 {
		c.Bound = 5 * time.Second
	}
	if c.Fault == "" {
		c.Fault = None
	}
	if c.Workload == "" {
		c.Workload = WorkloadMutex
	}
	if c.Workload == WorkloadSemaphore && c.Limit <= 0 {
		c.Limit = 3
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// check reports a configuration the run cannot carry out.
func (c *Config) check() error {
	switch {
	case c.Backend == "":
		return errors.New("verify: Config.Backend is empty")
	case c.Open == nil && (c.Spawn == nil || c.Deploy.URL == nil):
		return errors.New("verify: Config needs Spawn and Deploy.URL, or Open")
	case c.Open != nil && c.Fault != None:
		return fmt.Errorf("verify: fault %q needs client processes (Spawn), not in-process clients", c.Fault)
	case c.Fault.proxied() && len(c.Deploy.Endpoints) == 0:
		return fmt.Errorf("verify: fault %q needs host:port endpoints to proxy", c.Fault)
	case c.Fault == Restart && c.Deploy.Restart == nil:
		return fmt.Errorf("verify: fault %q needs Deploy.Restart", c.Fault)
	case c.Fault == Member && (c.Deploy.Members < 2 || c.Deploy.StopMember == nil || c.Deploy.StartMember == nil):
		return fmt.Errorf("verify: fault %q needs a deployment of several members", c.Fault)
	case c.Fault == Skew && c.Clients < 3:
		return fmt.Errorf("verify: fault %q needs at least 3 clients: two skewed, one or more with a correct clock", c.Fault)
	case c.Fault == MemberCut && (c.Deploy.Members < 3 || len(c.Deploy.Endpoints) != c.Deploy.Members || c.Deploy.Isolate == nil || c.Deploy.Rejoin == nil || c.Deploy.Leader == nil):
		return fmt.Errorf("verify: fault %q needs a deployment of three or more members, one endpoint each, that can be cut from each other", c.Fault)
	case c.Fault == MemberCut && c.Clients < c.Deploy.Members:
		return fmt.Errorf("verify: fault %q needs a client on every member: at least %d clients", c.Fault, c.Deploy.Members)
	case c.Fault == Evict && (c.Deploy.Fill == nil || c.Deploy.Free == nil):
		return fmt.Errorf("verify: fault %q needs Deploy.Fill and Deploy.Free", c.Fault)
	case c.Fault == PartitionRestart && (c.Deploy.Members < 3 || len(c.Deploy.Endpoints) != c.Deploy.Members || c.Deploy.StopMember == nil || c.Deploy.StartMember == nil):
		return fmt.Errorf("verify: fault %q needs a deployment of three or more members, one endpoint each, that can be restarted", c.Fault)
	}
	if !slices.Contains(Workloads, c.Workload) {
		return fmt.Errorf("verify: unknown workload %q (mutex, mutex-fair, semaphore, rwmutex, election)", c.Workload)
	}
	switch c.Fault {
	case None, Pause, Kill, Net, Restart, Member, Skew, MemberCut, Evict, PartitionRestart, BreakPartition:
		return nil
	}
	return fmt.Errorf("verify: unknown fault %q (none, pause, kill, net, restart, member, skew, member-cut, evict, partition-restart, break-partition)", c.Fault)
}

// Run runs the workload against the deployment while injecting cfg.Fault,
// writes the merged history, and checks it. The faults are injected from
// the calling goroutine (Deploy's functions are called there). An error
// means the run could not be carried out; a violation is in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := offers(ctx, cfg); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "dlock-verify-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	parts := filepath.Join(cfg.Dir, "parts")
	// The processes append to their histories there: a Dir used before
	// would mix that run's events into this one's.
	if err := os.RemoveAll(parts); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parts, 0o755); err != nil {
		return nil, err
	}
	hf, err := os.Create(filepath.Join(parts, "harness.jsonl"))
	if err != nil {
		return nil, err
	}
	defer hf.Close()
	h := &harness{cfg: cfg, parts: parts, rec: newRecorder("nemesis", hf), procs: map[int]*client{}}
	h.reg, err = startRegister(newRecorder("register", hf))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	h.until = start.Add(cfg.Duration)
	for i := range cfg.Names {
		h.names = append(h.names, fmt.Sprintf("verify/%s/%d/lock-%d", cfg.Backend, start.UnixNano(), i))
	}
	fmt.Fprintf(cfg.Log, "verify %s × %s × %s: %d clients, TTL %v, %v, history in %s\n", cfg.Backend, cfg.Workload, cfg.Fault, cfg.Clients, cfg.TTL, cfg.Duration, cfg.Dir)

	runErr := h.run(ctx)
	h.reg.close()
	if runErr != nil {
		return nil, runErr
	}
	events, err := mergeHistories(parts)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	err = WriteHistory(f, events)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	res := Check(events, Params{TTL: cfg.TTL, Bound: cfg.Bound, Until: h.until, Faults: cfg.Fault != None, TokensMayReset: cfg.TokensMayReset, Allowances: cfg.Allowances})
	res.Backend, res.Fault, res.History = cfg.Backend, string(cfg.Fault), path
	res.Workload = string(cfg.Workload)
	if cfg.Workload == WorkloadSemaphore {
		res.Workload = fmt.Sprintf("semaphore %d", cfg.Limit)
	}
	if err := h.rec.failed(); err != nil {
		res.violate(CheckComplete, "the harness could not record its events (faults, register decisions): %v", err)
	}
	if cfg.Fault != None && h.rounds == 0 {
		res.violate(CheckComplete, "the run was too short to inject %s: it needs room for a round and TTL + bound + 1s of recovery after it", cfg.Fault)
	}
	return res, nil
}

// Offered says whether a backend with capabilities caps offers workload
// w's primitive.
func Offered(w Workload, caps driver.Capabilities) bool {
	switch w {
	case WorkloadSemaphore:
		return caps.Semaphore
	case WorkloadRWMutex:
		return caps.RWMutex
	case WorkloadFairMutex:
		return caps.Fair
	}
	return true
}

// offers returns an error if the backend does not offer the workload's
// primitive (Capabilities), rather than a run whose every acquire fails.
func offers(ctx context.Context, cfg Config) error {
	if cfg.Workload != WorkloadSemaphore && cfg.Workload != WorkloadRWMutex && cfg.Workload != WorkloadFairMutex {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	var c *dlock.Client
	var err error
	if cfg.Open != nil {
		c, err = cfg.Open(octx)
	} else {
		c, err = dlock.Open(octx, cfg.Deploy.URL(cfg.Deploy.Endpoints))
	}
	if err != nil {
		return fmt.Errorf("verify: open the backend to read what it offers: %w", err)
	}
	defer c.Close()
	caps := c.Capabilities()
	if !Offered(cfg.Workload, caps) {
		return fmt.Errorf("verify: %s does not offer the %s workload's primitive (%w)", cfg.Backend, cfg.Workload, dlock.ErrUnsupported)
	}
	return nil
}

// harness runs one verification: the register, the clients, the faults.
type harness struct {
	cfg    Config
	parts  string // the processes' own histories and logs
	rec    *recorder
	reg    *register
	names  []string
	until  time.Time
	rounds int // fault rounds injected

	mu    sync.Mutex
	procs map[int]*client // by slot
	all   []*client       // every client process started, in order
	wg    sync.WaitGroup  // in-process clients
	admin *dlock.Client   // the operator's client (BreakPartition), opened at the first Break
}

// client is one client process (or goroutine) of the workload.
type client struct {
	slot, incarnation int
	proc              string
	p                 *testenv.Process // nil for in-process clients
	proxies           []*testenv.Proxy // the Net fault's proxies, one per endpoint
}

func (h *harness) run(ctx context.Context) error {
	defer h.stopAll()
	defer func() {
		if h.admin != nil {
			h.admin.Close()
		}
	}()
	for slot := range h.cfg.Clients {
		if err := h.spawn(ctx, slot, 0); err != nil {
			return err
		}
	}
	if h.cfg.Fault != None {
		h.nemesis(ctx)
	}
	// Wait for the clients to finish their last hold: each stops acquiring
	// at h.until and then releases within a bounded time.
	grace := h.until.Add(2*h.cfg.TTL + drainSlack)
	h.mu.Lock()
	procs := make([]*client, 0, len(h.procs))
	for _, c := range h.procs {
		procs = append(procs, c)
	}
	h.mu.Unlock()
	for _, c := range procs {
		if c.p == nil {
			continue
		}
		select {
		case <-c.p.Exited():
		case <-ctx.Done():
			c.p.Kill()
		case <-time.After(time.Until(grace)):
			fmt.Fprintf(h.cfg.Log, "verify: client %s did not finish in time; killed\n", c.proc)
			c.p.Kill()
			h.rec.record(Event{Op: OpKill, Target: c.proc, Err: "did not finish in time"})
		}
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(grace)):
		return errors.New("verify: in-process clients did not finish")
	}
	h.recordExits()
	return ctx.Err()
}

// recordExits records how each client process ended (OpExit): a client
// that failed, or could not record its whole history, leaves a history that
// cannot be trusted. Every process has exited or been killed by now.
func (h *harness) recordExits() {
	h.mu.Lock()
	all := append([]*client(nil), h.all...)
	h.mu.Unlock()
	for _, c := range all {
		if c.p == nil {
			continue
		}
		select {
		case <-c.p.Exited():
		case <-time.After(exitWait):
			h.rec.record(Event{Op: OpExit, Target: c.proc, Err: "did not exit"})
			continue
		}
		e := Event{Op: OpExit, Target: c.proc}
		if st := c.p.Cmd.ProcessState; st != nil && !st.Success() {
			e.Err = st.String()
			if st.ExitCode() == raceExitCode {
				e.Excuse = foreignRaces(c.p.Log)
			}
		}
		h.rec.record(e)
	}
}

// spawn starts the client of slot, incarnation n.
func (h *harness) spawn(ctx context.Context, slot, n int) error {
	c := &client{slot: slot, incarnation: n, proc: fmt.Sprintf("c%d.%d", slot, n)}
	wc := WorkerConfig{
		Proc: c.proc, Names: h.names, TTL: h.cfg.TTL, HoldMin: h.cfg.HoldMin, HoldMax: h.cfg.HoldMax,
		Until: h.until, Register: h.reg.addr(), History: filepath.Join(h.parts, c.proc+".jsonl"),
		Seed: uint64(slot)<<32 | uint64(n), Workload: h.cfg.Workload, Limit: h.cfg.Limit,
	}
	var skew string
	var rate float64
	if h.cfg.Fault == Skew {
		switch slot {
		case 0:
			wc.ClockRate, wc.ClockOffset = 1, SkewOffset
			skew = fmt.Sprintf("clock %v ahead", SkewOffset)
		case 1:
			wc.ClockRate, rate = SkewRate, SkewRate
			skew = fmt.Sprintf("clock rate %v", SkewRate)
		}
	}
	if h.cfg.Open != nil {
		cl, err := h.cfg.Open(ctx)
		if err != nil {
			return fmt.Errorf("verify: open client %s: %w", c.proc, err)
		}
		f, err := os.Create(wc.History)
		if err != nil {
			return err
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer f.Close()
			defer cl.Close()
			rec := newRecorder(c.proc, f)
			runWorker(ctx, wc, cl, rec)
			exit := Event{Op: OpExit, Target: c.proc}
			if err := rec.failed(); err != nil {
				exit.Err = "recording the history: " + err.Error()
			}
			h.rec.record(exit)
		}()
		h.mu.Lock()
		h.procs[slot] = c
		h.mu.Unlock()
		return nil
	}
	endpoints := h.cfg.Deploy.Endpoints
	if h.cfg.Fault == MemberCut {
		endpoints = []string{endpoints[slot%len(endpoints)]}
	}
	if h.cfg.Fault.proxied() {
		endpoints = nil
		for _, e := range h.cfg.Deploy.Endpoints {
			p, err := testenv.StartProxy(e)
			if err != nil {
				return err
			}
			c.proxies = append(c.proxies, p)
			endpoints = append(endpoints, p.Addr())
		}
	}
	wc.URL = h.cfg.Deploy.URL(endpoints)
	b, _ := json.Marshal(wc)
	cmd := h.cfg.Spawn()
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	p, err := testenv.StartProcess(c.proc, cmd, h.parts)
	if err != nil {
		return fmt.Errorf("verify: start client process: %w", err)
	}
	c.p = p
	h.rec.record(Event{Op: OpSpawn, Target: c.proc, Fault: skew, Rate: rate})
	h.mu.Lock()
	h.procs[slot] = c
	h.all = append(h.all, c)
	h.mu.Unlock()
	return nil
}

func (h *harness) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.procs {
		if c.p != nil {
			c.p.Kill()
		}
		for _, p := range c.proxies {
			p.Close()
		}
	}
}

// The harness's timings.
const (
	// drainSlack is added to two TTLs to wait for the clients' last holds:
	// each stops acquiring at the end of the run and releases within an
	// Unlock's bound (two TTLs and unlockSlack); the rest is room for a
	// slow client process to record its release.
	drainSlack = 15 * time.Second
	// exitWait bounds the wait for a client process to exit after it was
	// told to; one that does not is recorded as such.
	exitWait = 10 * time.Second
	// faultMargin is added to a fault's length beyond TTL + TTL/4, for the
	// server's expiry to run after the TTL has passed.
	faultMargin = 250 * time.Millisecond
	// warmupMin is the least time the clients run before the first fault.
	warmupMin = time.Second
	// progressPoll is how often the nemesis looks for an accepted write or
	// a hold begun.
	progressPoll = 20 * time.Millisecond
)

// nemesis injects the fault again and again until the tail of the run,
// which is left quiet so that recovery after the last heal can be judged.
// Each round: wait until a client holds a lock, inject, keep the fault
// long enough for the lease to expire, heal, and wait for grants to resume.
// After the last round it ends the run early (register.stop) once a grant
// has followed the last heal and two TTLs have passed since it, or TTL +
// bound passed without a grant: the clients stop asking at their next
// register reply.
func (h *harness) nemesis(ctx context.Context) {
	ttl := h.cfg.TTL
	// Long enough for the lease to expire on the server, which counts the
	// TTL from the last renewal (at most TTL/3 before the fault).
	faultFor := ttl + ttl/4 + faultMargin
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if h.cfg.Fault == Skew {
		faultFor = SkewHold * ttl
	}
	if !sleep(max(ttl/2, warmupMin)) {
		return
	}
	// A fault before the workload runs tests nothing: wait for the first
	// accepted write or hold begun (client processes start slowly on a
	// loaded machine).
	for h.reg.progress() == 0 && time.Now().Before(h.until) {
		if !sleep(progressPoll) {
			return
		}
	}
	// A round is injected only if its heal, even as late as the longest
	// round so far, leaves the clients asking for leases for TTL + bound +
	// 1s after it: recovery is judged after every heal.
	tail := ttl + h.cfg.Bound + time.Second
	longest := faultFor
	room := func() bool { return time.Now().Add(longest + tail).Before(h.until) }
	var lastHeal time.Time
	for n := 0; room(); n++ {
		rd := round{n: n}
		switch h.cfg.Fault {
		case Pause, Kill, Net, BreakPartition:
			// The hold outlasts the fault a little, so that the lease can
			// be lost while held and is released soon after the heal.
			rd.target, rd.name = h.holder(nil, ttl, faultFor+ttl/10)
		case Evict:
			// A lock is held when the memory fills (an evicting policy may
			// take it), and released half a TTL later, while the memory is
			// still full: then the lock must not be granted (noeviction
			// refuses the write) or may be (the policy evicts).
			rd.target, rd.name = h.holder(nil, ttl, ttl/2)
		case MemberCut:
			// A follower, in turn, and a holder among its clients if one
			// begins soon: the member is cut whether or not one did.
			leader := h.cfg.Deploy.Leader()
			var followers []int
			for i := range h.cfg.Deploy.Members {
				if i != leader {
					followers = append(followers, i)
				}
			}
			rd.member = followers[n%len(followers)]
			rd.target, rd.name = h.holder(h.pinnedTo(rd.member), 2*ttl, faultFor+ttl/10)
		case Skew:
			// The slow clock first, then the one that is ahead.
			rd.target = h.skewedHolder(1-n%2, 2*ttl, faultFor)
			if rd.target == nil {
				continue
			}
		}
		if rd.name == "" {
			rd.name = h.names[0]
		}
		if !room() { // the wait for a holder took it
			break
		}
		h.rounds++
		began := time.Now()
		h.inject(ctx, rd, faultFor)
		lastHeal = time.Now()
		longest = max(longest, time.Since(began))
		// Let grants resume before the next round, and the servers settle.
		before := h.reg.progress()
		deadline := time.Now().Add(ttl + h.cfg.Bound)
		for time.Now().Before(deadline) {
			if h.reg.progress() > before {
				break
			}
			if !sleep(progressPoll) {
				return
			}
		}
		if settled := h.cfg.Deploy.Settled; settled != nil {
			for deadline := time.Now().Add(ttl + h.cfg.Bound); time.Now().Before(deadline) && !settled(); {
				if !sleep(progressPoll) {
					return
				}
			}
		}
		if !sleep(ttl / 2) {
			return
		}
	}
	if lastHeal.IsZero() {
		return // no round: the run goes to its end, and says so
	}
	// Every lease the last fault could touch has been renewed or has
	// expired two TTLs after the heal; recovery was waited for above.
	if !sleep(time.Until(lastHeal.Add(2 * ttl))) {
		return
	}
	h.reg.stop()
	if now := time.Now(); now.Before(h.until) {
		h.until = now
	}
	fmt.Fprintf(h.cfg.Log, "verify: %d rounds done; the clients stop after their current hold\n", h.rounds)
}

// round is one injection of the fault: the client and the lock it is
// aimed at (nil and "" for faults aimed at servers), and the member it
// cuts (MemberCut).
type round struct {
	n      int
	target *client
	name   string
	member int
}

// pinnedTo returns the client processes that talk to member i only (the
// MemberCut fault).
func (h *harness) pinnedTo(i int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var procs []string
	for slot, c := range h.procs {
		if slot%h.cfg.Deploy.Members == i {
			procs = append(procs, c.proc)
		}
	}
	return procs
}

// holder returns a client process that holds a lock now, and the lock: it
// asks the register to stretch the next hold to begin (of one of procs, if
// any) to holdFor (the client holds that long, or until its lease is lost),
// waiting up to wait; else it returns a random client (of procs, if any)
// and no lock.
func (h *harness) holder(procs []string, wait, holdFor time.Duration) (*client, string) {
	s := h.reg.stretchNext(procs, wait, holdFor)
	h.mu.Lock()
	defer h.mu.Unlock()
	var candidates []*client
	for _, c := range h.procs {
		if c.proc == s.proc {
			return c, s.name
		}
		if len(procs) == 0 || slices.Contains(procs, c.proc) {
			candidates = append(candidates, c)
		}
	}
	return candidates[rand.IntN(len(candidates))], ""
}

// skewedHolder is holder for the client of slot: it returns that client
// once a hold of its own has begun, stretched to holdFor, or nil if none
// began within wait.
func (h *harness) skewedHolder(slot int, wait, holdFor time.Duration) *client {
	h.mu.Lock()
	c := h.procs[slot]
	h.mu.Unlock()
	if c == nil || h.reg.stretchNext([]string{c.proc}, wait, holdFor).proc == "" {
		return nil
	}
	return c
}

// inject applies one round of the fault and heals it.
func (h *harness) inject(ctx context.Context, rd round, faultFor time.Duration) {
	c := rd.target
	fault := string(h.cfg.Fault)
	wait := func() {
		select {
		case <-ctx.Done():
		case <-time.After(faultFor):
		}
	}
	switch h.cfg.Fault {
	case Pause:
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
		c.p.Pause()
		wait()
		c.p.Resume()
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: c.proc})
	case Kill:
		// The fault begins before the signal: a grant that completed after
		// this moment may have followed the kill.
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
		c.p.Kill() // returns once the process is dead: all its events precede the kill's
		h.rec.record(Event{Op: OpKill, Fault: fault, Target: c.proc})
		if err := h.spawn(ctx, c.slot, c.incarnation+1); err != nil {
			fmt.Fprintf(h.cfg.Log, "verify: restart client %d: %v\n", c.slot, err)
		}
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: c.proc})
	case Net:
		if rd.n%2 == 0 {
			fault = "net-partition"
			h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
			for _, p := range c.proxies {
				p.Block()
			}
			wait()
			for _, p := range c.proxies {
				p.Unblock()
			}
		} else {
			fault = "net-cut-and-delay"
			h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
			for _, p := range c.proxies {
				p.SetDelay(h.cfg.TTL / 10)
				p.Cut()
			}
			wait()
			for _, p := range c.proxies {
				p.SetDelay(0)
			}
		}
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: c.proc})
	case BreakPartition:
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
		for _, p := range c.proxies {
			p.Block()
		}
		began := time.Now()
		h.breakLock(ctx, rd.name, c.proc)
		select {
		case <-ctx.Done():
		case <-time.After(faultFor - time.Since(began)):
		}
		for _, p := range c.proxies {
			p.Unblock()
		}
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: c.proc})
	case Restart:
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: "servers"})
		h.cfg.Deploy.Restart()
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: "servers"})
	case Skew:
		// The clock is wrong all along; the round is the long hold that
		// makes it matter.
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: c.proc})
		wait()
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: c.proc})
	case Member:
		i := rd.n % h.cfg.Deploy.Members
		target := fmt.Sprintf("member %d", i)
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: target})
		h.cfg.Deploy.StopMember(i)
		wait()
		h.cfg.Deploy.StartMember(i)
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: target})
	case MemberCut:
		target := fmt.Sprintf("member %d", rd.member)
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: target})
		h.cfg.Deploy.Isolate(rd.member)
		wait()
		h.cfg.Deploy.Rejoin(rd.member)
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: target})
		if c != nil {
			fault += " of " + target
		}
	case Evict:
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: "server"})
		h.cfg.Deploy.Fill()
		wait()
		h.cfg.Deploy.Free()
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: "server"})
	case PartitionRestart:
		// The cut node misses the grants made while it is away; then
		// another node restarts; then the cut heals. The cut alternates:
		// connections to the node refused (the clients hear at once that
		// it is down), then frozen (they hear nothing).
		m := h.cfg.Deploy.Members
		cut, restarted := rd.n%m, (rd.n+1)%m
		how := "refused"
		if rd.n%2 == 1 {
			how = "frozen"
		}
		target := fmt.Sprintf("node %d cut (%s), node %d restarted", cut, how, restarted)
		h.rec.record(Event{Op: OpFault, Fault: fault, Target: target})
		h.cutEndpoint(cut, how == "frozen", true)
		// A grant made while the node is away, held on the two others
		// (stretched: it cannot be released before the heal), so that
		// the restart takes it from one of them while it is held.
		c, _ = h.holder(nil, h.cfg.TTL+time.Second, faultFor)
		h.cfg.Deploy.StopMember(restarted)
		h.cfg.Deploy.StartMember(restarted)
		// Heal while that holder's lock is still on the third node: the
		// next grant is then made on the node that was away and the one
		// that restarted.
		select {
		case <-ctx.Done():
		case <-time.After(h.cfg.TTL / 2):
		}
		h.cutEndpoint(cut, how == "frozen", false)
		h.rec.record(Event{Op: OpHeal, Fault: fault, Target: target})
		fault += ": " + target
	}
	if c != nil {
		fault += " on " + c.proc
	}
	fmt.Fprintf(h.cfg.Log, "verify: %s healed\n", fault)
}

// cutEndpoint cuts every client off from endpoint i, its connections
// frozen or refused, or (cut false) heals that.
func (h *harness) cutEndpoint(i int, frozen, cut bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.procs {
		if i >= len(c.proxies) {
			continue
		}
		switch p := c.proxies[i]; {
		case frozen && cut:
			p.Block()
		case frozen:
			p.Unblock()
		case cut:
			p.Refuse()
		default:
			if err := p.Admit(); err != nil {
				fmt.Fprintf(h.cfg.Log, "verify: heal the cut of endpoint %d: %v\n", i, err)
			}
		}
	}
}

// breakLock breaks name from the harness, as an operator would, and
// records the Break (OpBreak, aimed at the hold of proc).
func (h *harness) breakLock(ctx context.Context, name, proc string) {
	if h.admin == nil {
		octx, cancel := context.WithTimeout(ctx, openTimeout)
		admin, err := dlock.Open(octx, h.cfg.Deploy.URL(h.cfg.Deploy.Endpoints))
		cancel()
		if err != nil {
			h.rec.record(Event{Op: OpBreak, Phase: Fail, Name: name, Target: proc, Err: "open an admin client: " + err.Error()})
			return
		}
		h.admin = admin
	}
	id := h.rec.nextID()
	h.rec.record(Event{Op: OpBreak, Phase: Invoke, ID: id, Name: name, Target: proc})
	bctx, cancel := context.WithTimeout(ctx, h.cfg.TTL+unlockSlack)
	err := h.admin.Break(bctx, name)
	cancel()
	if err != nil {
		h.rec.record(Event{Op: OpBreak, Phase: Fail, ID: id, Name: name, Target: proc, Err: err.Error()})
		fmt.Fprintf(h.cfg.Log, "verify: break %s: %v\n", name, err)
		return
	}
	h.rec.record(Event{Op: OpBreak, Phase: OK, ID: id, Name: name, Target: proc})
}
