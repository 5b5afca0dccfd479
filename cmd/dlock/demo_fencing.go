package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock/dlock"
)

const fencingUsage = `Usage:
  dlock demo fencing [flags]

Martin Kleppmann's scenario ("How to do distributed locking", 2016), run for
real with two processes and a store:

  1. Holder 1 acquires the lock (fencing token T), checks that its lease is
     valid, and is about to write to the store.
  2. Right then it is paused — SIGSTOP here; in life a GC pause, a VM
     migration, a swapped-out page — for longer than the lease's TTL.
  3. The lease expires on the backend. Holder 2 acquires the lock with token
     T+1 or higher, and writes.
  4. Holder 1 resumes and, believing it still holds the lock, writes. The
     store remembers the highest token it has accepted and refuses the
     stale write. A store that did not check would have let holder 1
     overwrite holder 2's data.

No check made by the lock's client can close the gap between step 1's check
and step 4's write; the token checked by the resource does. dlock exits with
status 0 when the stale write was refused, 1 otherwise.

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock demo fencing
`

const fencingHolderCmd = "_fencing-holder"

// fencingEvent is a line a holder process reports on its stdout.
type fencingEvent struct {
	Event  string        `json:"event"` // asking, acquired, checked, wrote, lost, released, error
	Token  uint64        `json:"token,omitempty"`
	Left   time.Duration `json:"left,omitempty"`
	Detail string        `json:"detail,omitempty"`
}

// The fencing demo's bounds: generous, so that a slow machine or backend
// slows the story down rather than breaking it.
const (
	// fencingCallTimeout bounds one step that should take milliseconds: a
	// request to the store, a holder's stop after SIGSTOP, an Unlock.
	fencingCallTimeout = 10 * time.Second
	// fencingEventTimeout bounds the wait for a holder's next event, which
	// may include waiting out holder 1's TTL.
	fencingEventTimeout = time.Minute
	// fencingExitWait bounds the wait for a holder process to exit.
	fencingExitWait = 30 * time.Second
	// fencingHolderLimit bounds a holder process's whole life.
	fencingHolderLimit = 2 * time.Minute
	// fencingBeat is the pause before holder 1 resumes, so that a reader
	// sees holder 2's release before the stale write.
	fencingBeat = 500 * time.Millisecond
)

func fencingCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock demo fencing", fencingUsage, env.stdout)
	bf.register(fs)
	ttl := fs.Duration("ttl", 2*time.Second, "the lease length `D`; holder 1 is paused for longer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	if *ttl <= 0 {
		return usageErrorf("--ttl %v: must be positive", *ttl)
	}
	b, err := bf.ownOrEmbedded(ctx, env, env.stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := bf.checkShared(ctx, b); err != nil {
		return err
	}

	store := &fencedStore{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: store, ReadHeaderTimeout: fencingCallTimeout}
	go srv.Serve(ln)
	defer srv.Close()

	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := "demo/fencing/" + hex.EncodeToString(suffix[:])
	d := &fencingDemo{w: env.stdout, start: time.Now(), b: b, name: name, ttl: *ttl, storeURL: "http://" + ln.Addr().String(), store: store}
	store.log = d.say
	fmt.Fprintf(env.stdout, "dlock demo fencing: Kleppmann's paused lock holder, run for real.\n")
	fmt.Fprintf(env.stdout, "Lock %q on %s, TTL %v.\n", name, b, *ttl)
	fmt.Fprintf(env.stdout, "The store refuses a write whose token is below the highest it has accepted.\n\n")
	defer d.cleanup()
	return d.run(ctx)
}

type fencingDemo struct {
	w        io.Writer
	start    time.Time
	b        *backend
	name     string
	ttl      time.Duration
	storeURL string
	store    *fencedStore

	mu    sync.Mutex
	procs []*holderProc
}

// say prints one line of the timeline.
func (d *fencingDemo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "  %-7s  %-20s  %s\n", since(d.start), who, fmt.Sprintf(format, args...))
}

func (d *fencingDemo) run(ctx context.Context) error {
	h1, err := d.startHolder(1)
	if err != nil {
		return err
	}
	who1 := fmt.Sprintf("holder 1 (pid %d)", h1.pid())
	ev, err := h1.next(ctx, "acquired")
	if err != nil {
		return err
	}
	t1 := ev.Token
	d.say(who1, "acquired the lock with token %d", t1)
	if ev, err = h1.next(ctx, "checked"); err != nil {
		return err
	}
	d.say("holder 1", "checked its lease: valid for another %v; now it writes…", round(ev.Left))
	h1.signal(syscall.SIGSTOP)
	// Tell it to write only once it is stopped: a thread that has not yet
	// taken the stop could read the word and write before holder 2 asks.
	if !waitStopped(h1.pid(), fencingCallTimeout) {
		return fmt.Errorf("holder 1 (pid %d) did not stop within %v of SIGSTOP", h1.pid(), fencingCallTimeout)
	}
	d.say("", "holder 1 is PAUSED (SIGSTOP) between its check and its write —")
	d.say("", "as by a long GC pause; its lease renewals stop too")
	if _, err := io.WriteString(h1.stdin, "write\n"); err != nil { // read when it resumes
		return err
	}

	h2, err := d.startHolder(2)
	if err != nil {
		return err
	}
	who2 := fmt.Sprintf("holder 2 (pid %d)", h2.pid())
	if _, err = h2.next(ctx, "asking"); err != nil {
		return err
	}
	d.say(who2, "asks for the lock, and waits")
	if ev, err = h2.next(ctx, "acquired"); err != nil {
		return err
	}
	t2 := ev.Token
	d.say("holder 2", "acquired the lock with token %d: holder 1's lease expired on the backend", t2)
	if _, err := io.WriteString(h2.stdin, "write\n"); err != nil {
		return err
	}
	if ev, err = h2.next(ctx, "wrote"); err != nil {
		return err
	}
	if _, err = h2.next(ctx, "released"); err != nil {
		return err
	}
	d.say("holder 2", "released the lock")
	h2.wait()

	time.Sleep(fencingBeat)
	d.say("", "holder 1 RESUMES (SIGCONT), still sure it holds the lock, and writes")
	h1.signal(syscall.SIGCONT)
	if ev, err = h1.next(ctx, "wrote"); err != nil {
		return err
	}
	if ev, err = h1.next(ctx, "lost"); err == nil {
		why := ev.Detail // `lease lost: "name": why`
		if i := strings.LastIndex(why, `": `); i >= 0 {
			why = why[i+3:]
		}
		d.say("holder 1", "finds out, too late, that its lease was lost: %s", why)
	}
	h1.wait()

	value, token, unfenced := d.store.state()
	fmt.Fprintf(d.w, "\n")
	if token != t2 || unfenced == value {
		fmt.Fprintf(d.w, "The store holds %q (token %d): the stale write was NOT refused.\n", value, token)
		return fmt.Errorf("the stale write of holder 1 (token %d) was accepted", t1)
	}
	fmt.Fprintf(d.w, "The store holds %q, written with token %d. Holder 1's write with token %d was\n", value, token, t1)
	fmt.Fprintf(d.w, "refused. A store that did not check tokens would hold %q now:\n", unfenced)
	fmt.Fprintf(d.w, "holder 2's write silently lost, though each holder checked its lock before writing.\n")
	return nil
}

// holderProc is one holder process of the demo and its event stream.
type holderProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan fencingEvent
	exited chan struct{}
}

// startHolder starts holder id; it writes when told to on its stdin.
func (d *fencingDemo) startHolder(id int) (*holderProc, error) {
	args := []string{fencingHolderCmd, "--id", strconv.Itoa(id), "--name", d.name, "--ttl", d.ttl.String(), "--store", d.storeURL}
	cmd, err := selfCommand(d.b, args...)
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder %d: %w", id, err)
	}
	h := &holderProc{cmd: cmd, stdin: stdin, events: make(chan fencingEvent, 16), exited: make(chan struct{})}
	d.mu.Lock()
	d.procs = append(d.procs, h)
	d.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev fencingEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				ev = fencingEvent{Event: "error", Detail: sc.Text()}
			}
			h.events <- ev
		}
		cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

func (h *holderProc) pid() int { return h.cmd.Process.Pid }

func (h *holderProc) signal(sig syscall.Signal) { _ = syscall.Kill(h.pid(), sig) }

// next waits for the holder's event of the given kind.
func (h *holderProc) next(ctx context.Context, kind string) (fencingEvent, error) {
	timeout := time.After(fencingEventTimeout)
	for {
		select {
		case ev := <-h.events:
			switch ev.Event {
			case kind:
				return ev, nil
			case "error":
				return ev, fmt.Errorf("holder process %d: %s", h.pid(), ev.Detail)
			}
		case <-h.exited:
			return fencingEvent{}, fmt.Errorf("holder process %d exited before it %s", h.pid(), kind)
		case <-ctx.Done():
			return fencingEvent{}, ctx.Err()
		case <-timeout:
			return fencingEvent{}, fmt.Errorf("holder process %d: no %q event within a minute", h.pid(), kind)
		}
	}
}

func (h *holderProc) wait() {
	select {
	case <-h.exited:
	case <-time.After(fencingExitWait):
	}
}

func (d *fencingDemo) cleanup() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.procs {
		h.signal(syscall.SIGCONT)
		_ = h.cmd.Process.Kill()
		h.wait()
	}
}

// fencedStore is the protected resource: it accepts a write only if its
// token is at least the highest it has accepted. It also keeps what a store
// without that check would hold, for the comparison.
type fencedStore struct {
	log func(who, format string, args ...any)

	mu       sync.Mutex
	highest  uint64
	value    string
	unfenced string
}

func (s *fencedStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
	if r.Method != http.MethodPost || err != nil {
		http.Error(w, "POST /?token=N with the value as the body", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	value := string(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unfenced = value
	if token < s.highest {
		s.log("store", "REFUSES %q with token %d: it has accepted token %d", value, token, s.highest)
		http.Error(w, fmt.Sprintf("refused: token %d is below %d", token, s.highest), http.StatusConflict)
		return
	}
	s.highest, s.value = token, value
	s.log("store", "accepts %q with token %d", value, token)
	fmt.Fprintln(w, "accepted")
}

func (s *fencedStore) state() (value string, token uint64, unfenced string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, s.highest, s.unfenced
}

// fencingHolder is a holder process of "dlock demo fencing": it takes the
// lock, checks its lease, waits for the word on its stdin (so that the
// timeline prints in order; holder 1 is paused right there), writes to the
// store with its token, and reports each step.
func fencingHolder(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(fencingHolderCmd, "", env.stdout)
	id := fs.Int("id", 0, "")
	name := fs.String("name", "", "")
	ttl := fs.Duration("ttl", 2*time.Second, "")
	storeURL := fs.String("store", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	enc := json.NewEncoder(env.stdout)
	emit := func(ev fencingEvent) { _ = enc.Encode(ev) }
	fail := func(err error) error {
		emit(fencingEvent{Event: "error", Detail: oneLine(err)})
		return exitStatus(1)
	}
	ctx, cancel := context.WithTimeout(ctx, fencingHolderLimit)
	defer cancel()
	c, err := dlock.Open(ctx, os.Getenv("DLOCK_BACKEND"))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	emit(fencingEvent{Event: "asking"})
	l, err := c.Mutex(*name, dlock.WithTTL(*ttl)).Lock(ctx)
	if err != nil {
		return fail(err)
	}
	emit(fencingEvent{Event: "acquired", Token: l.Token()})
	if l.Err() != nil {
		return fail(l.Err())
	}
	emit(fencingEvent{Event: "checked", Left: time.Until(l.Expires())})
	// Holder 1 is stopped here, and resumed after its lease has expired.
	// It checks nothing again: that is the point.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	value := fmt.Sprintf("written by holder %d", *id)
	resp, err := http.Post(*storeURL+"/?token="+strconv.FormatUint(l.Token(), 10), "text/plain", strings.NewReader(value))
	if err != nil {
		return fail(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	emit(fencingEvent{Event: "wrote", Token: l.Token(), Detail: strings.TrimSpace(string(answer))})

	if *id == 1 { // it lost its lease while paused; let it find out
		select {
		case <-l.Done():
		case <-time.After(*ttl):
		}
	}
	uctx, ucancel := context.WithTimeout(context.Background(), fencingCallTimeout)
	defer ucancel()
	switch err := l.Unlock(uctx); {
	case err == nil:
		emit(fencingEvent{Event: "released"})
	case errors.Is(err, dlock.ErrLeaseLost):
		emit(fencingEvent{Event: "lost", Detail: oneLine(err)})
	default:
		return fail(err)
	}
	return nil
}
