package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// register is the fenced register: the protected resource of the
// workload. It keeps, per lock name, the value of the highest-token write it
// accepted, and accepts a write only if its token is at least that token —
// the check a resource makes with fencing tokens. It runs in the harness
// process on a loopback port and records each decision (OpDecide) in the
// order it made it.
type register struct {
	ln  net.Listener
	rec *recorder

	mu       sync.Mutex
	state    map[string]registerState
	seq      int64
	accepted int
	begun    int // holds begun with a read (Begin)
	// The next hold to begin is stretched for the fault injector: asked by
	// stretchNext, marked at its first write, told at its read.
	stretchWanted bool
	stretchOnly   []string // only a hold of one of these processes, if any
	stretchFor    time.Duration
	stretchProc   string
	stretched     chan stretchedHold
	// stopped: the harness has ended the run early; every reply tells the
	// client to stop asking for leases.
	stopped bool
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// stretchedHold is the hold stretched for a fault: its process and lock.
type stretchedHold struct{ proc, name string }

type registerState struct {
	token uint64
	value string
}

// registerRequest and registerReply are the register's wire protocol: one
// JSON object per line each way.
type registerRequest struct {
	Op    string `json:"op"` // "w" or "r"
	Proc  string `json:"proc,omitempty"`
	Name  string `json:"name"`
	Token uint64 `json:"token,omitempty"`
	Value string `json:"value,omitempty"`
	// Begin (read): this read begins a hold that writes nothing (a
	// reader's, a semaphore permit's): the hold may be the one stretched
	// for a fault.
	Begin bool `json:"begin,omitempty"`
}

type registerReply struct {
	OK    bool   `json:"ok"`              // write accepted (always true for reads)
	Token uint64 `json:"token,omitempty"` // read: the token; refused write: the highest accepted
	Value string `json:"value,omitempty"` // read: the value
	Seq   int64  `json:"seq,omitempty"`
	// StretchFor (read): hold the lock this long (or until the lease is
	// lost) rather than a random short time: a fault is aimed at this hold.
	StretchFor time.Duration `json:"stretch_for,omitempty"`
	// Stop: the run is over; finish this hold and ask for no more.
	Stop bool `json:"stop,omitempty"`
}

func startRegister(rec *recorder) (*register, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fenced register: %w", err)
	}
	r := &register{ln: ln, rec: rec, state: map[string]registerState{}, stretched: make(chan stretchedHold, 1), conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *register) addr() string { return r.ln.Addr().String() }

func (r *register) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns[c] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(c)
	}
}

func (r *register) serve(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
	}()
	dec := json.NewDecoder(bufio.NewReader(c))
	enc := json.NewEncoder(c)
	for {
		var req registerRequest
		if err := dec.Decode(&req); err != nil {
			return
		}
		if err := enc.Encode(r.apply(req)); err != nil {
			return
		}
	}
}

// apply decides one request; decisions are serialized by r.mu, and each
// write's decision is recorded before the reply is sent.
func (r *register) apply(req registerRequest) registerReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[req.Name]
	if req.Op == "r" {
		rep := registerReply{OK: true, Token: st.token, Value: st.value, Stop: r.stopped}
		if req.Begin {
			r.begun++
		}
		if req.Begin && r.stretchWanted && (len(r.stretchOnly) == 0 || slices.Contains(r.stretchOnly, req.Proc)) {
			r.stretchWanted = false
			r.stretched <- stretchedHold{req.Proc, req.Name}
			rep.StretchFor = r.stretchFor
		} else if req.Proc != "" && req.Proc == r.stretchProc {
			r.stretchProc, rep.StretchFor = "", r.stretchFor
		}
		return rep
	}
	r.seq++
	if proc, _, n, ok := parseWriteValue(req.Value); ok && n == 1 && r.stretchWanted && req.Token >= st.token && (len(r.stretchOnly) == 0 || slices.Contains(r.stretchOnly, proc)) {
		r.stretchWanted, r.stretchProc = false, proc
		r.stretched <- stretchedHold{proc, req.Name}
	}
	e := Event{Op: OpDecide, Name: req.Name, Token: req.Token, Value: req.Value, Seq: r.seq}
	if req.Token < st.token {
		e.Phase, e.Highest = Refused, st.token
		r.rec.record(e)
		return registerReply{OK: false, Token: st.token, Seq: r.seq, Stop: r.stopped}
	}
	r.state[req.Name] = registerState{token: req.Token, value: req.Value}
	e.Phase = OK
	r.rec.record(e)
	r.accepted++
	return registerReply{OK: true, Seq: r.seq, Stop: r.stopped}
}

// stop tells every client, in its next reply, to stop asking for leases.
func (r *register) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
}

// progress returns how many writes were accepted and holds begun without
// a write (a reader's, a semaphore permit's): it grows while clients are
// granted leases.
func (r *register) progress() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted + r.begun
}

// stretchNext asks that the next hold to begin (of one of procs, if any)
// last holdFor, and returns that hold, or a zero one if none began within
// wait.
func (r *register) stretchNext(procs []string, wait, holdFor time.Duration) stretchedHold {
	r.mu.Lock()
	r.stretchWanted, r.stretchOnly, r.stretchFor = true, procs, holdFor
	r.mu.Unlock()
	select {
	case s := <-r.stretched:
		return s
	case <-time.After(wait):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stretchWanted = false
	select {
	case s := <-r.stretched: // it came as we gave up
		return s
	default:
		return stretchedHold{}
	}
}

func (r *register) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

// registerClient is a client's connection to the register. An operation
// that fails (timeout, connection closed) drops the connection; the next
// one dials again.
type registerClient struct {
	addr    string
	timeout time.Duration
	conn    net.Conn
	dec     *json.Decoder
}

func (rc *registerClient) do(req registerRequest) (registerReply, error) {
	if rc.conn == nil {
		c, err := net.DialTimeout("tcp", rc.addr, rc.timeout)
		if err != nil {
			return registerReply{}, err
		}
		rc.conn, rc.dec = c, json.NewDecoder(bufio.NewReader(c))
	}
	_ = rc.conn.SetDeadline(time.Now().Add(rc.timeout))
	b, _ := json.Marshal(req)
	var rep registerReply
	_, err := rc.conn.Write(append(b, '\n'))
	if err == nil {
		err = rc.dec.Decode(&rep)
	}
	if err != nil {
		rc.close()
		return registerReply{}, err
	}
	return rep, nil
}

func (rc *registerClient) close() {
	if rc.conn != nil {
		rc.conn.Close()
		rc.conn = nil
	}
}

// writeValue is the value a client writes: who, which lease, which write.
func writeValue(proc string, hold, n int) string { return fmt.Sprintf("%s/%d/%d", proc, hold, n) }

// parseWriteValue splits a value made by writeValue.
func parseWriteValue(v string) (proc string, hold, n int, ok bool) {
	i := strings.IndexByte(v, '/')
	if i < 0 {
		return "", 0, 0, false
	}
	if _, err := fmt.Sscanf(v[i+1:], "%d/%d", &hold, &n); err != nil {
		return "", 0, 0, false
	}
	return v[:i], hold, n, true
}
