package verify

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Op names what an Event is about.
type Op string

// The operations of a history.
const (
	// Client operations, each an invocation followed by a completion.
	OpAcquire Op = "acquire" // Lock; ok carries the token
	OpWrite   Op = "write"   // a write of Value with Token to the fenced register
	OpRead    Op = "read"    // a read of the fenced register; ok carries what was read
	OpRelease Op = "release" // Unlock; fail when the lease was already lost
	// OpLost is recorded by the client when Lease.Done closed because the
	// lease was lost (not released): the moment the client learnt it.
	// It is recorded as the loss is decided, before Done closes; one
	// recorded after the hold's release was called was learnt only at
	// release.
	OpLost Op = "lost"
	// OpRenew is recorded by the client when its lease's proven deadline
	// (Lease.Expires, in Expires) moved forward: a renewal was confirmed.
	OpRenew Op = "renew"
	// OpObserve is recorded by a client of the election workload when
	// Election.Observe reported a leadership: the term in Token, the
	// leader's value (the client process that campaigned) in Value; a
	// Token of 0 is nobody leading.
	OpObserve Op = "observe"

	// OpDecide is the register's own record of a write it accepted or
	// refused, in the order it decided them (Seq).
	OpDecide Op = "decide"

	// Harness events.
	OpSpawn Op = "spawn" // a client process started (Target)
	OpFault Op = "fault" // a fault began (Fault, Target)
	OpHeal  Op = "heal"  // the fault ended: from here grants must resume
	OpKill  Op = "kill"  // a client process was killed with SIGKILL (Target); the fault "kill" began just before
	OpExit  Op = "exit"  // a client process exited (Target); Err is its status unless it succeeded
	// OpBreak is an operator's Client.Break of Name by the harness (the
	// BreakPartition fault), aimed at the hold of Target: an invocation
	// followed by ok or fail.
	OpBreak Op = "break"
)

// Phase says where in an operation an Event is.
type Phase string

// The phases of an operation.
const (
	Invoke  Phase = "invoke"  // the call is about to be made
	OK      Phase = "ok"      // it succeeded
	Refused Phase = "refused" // the register refused the write: a lower token than it accepted before
	Fail    Phase = "fail"    // it failed; for a write the outcome may be unknown
)

// Event is one line of a history.
type Event struct {
	// Time is the wall clock of the machine every process of the run shares,
	// taken just before an invocation and just after a completion, so the
	// true moment of an operation lies between its two events.
	Time time.Time `json:"time"`
	// Proc is who recorded it: a client process "c<slot>.<incarnation>"
	// (a killed client is replaced by the next incarnation of its slot),
	// "register", or "nemesis" (the fault injector).
	Proc  string `json:"proc"`
	Op    Op     `json:"op"`
	Phase Phase  `json:"phase,omitempty"`
	// ID ties an invocation to its completion within one Proc.
	ID int64 `json:"id,omitempty"`
	// Hold numbers the client's leases: every event of one lease has the
	// same Proc and Hold.
	Hold int `json:"hold,omitempty"`
	// Name is the lock name, and the register's key.
	Name string `json:"name,omitempty"`
	// Token is the lease's fencing token (acquire ok, write, lost, release)
	// or, for a read, the token of the value read.
	Token uint64 `json:"token,omitempty"`
	// Value is the value written, or read. Writes are "<proc>/<hold>/<n>".
	Value string `json:"value,omitempty"`
	// Highest is the highest token the register had accepted when it
	// refused a write.
	Highest uint64 `json:"highest,omitempty"`
	// Seq orders the register's decisions.
	Seq int64 `json:"seq,omitempty"`
	// Target and Fault describe a harness action.
	Target string `json:"target,omitempty"`
	Fault  string `json:"fault,omitempty"`
	// Rate is the clock rate of a skewed client (spawn), below 1 for a
	// clock that runs slow.
	Rate float64 `json:"rate,omitempty"`
	// Expires is the lease's proven deadline (Lease.Expires) on the real
	// clock, recorded with a grant (acquire ok) and each renewal (renew).
	Expires time.Time `json:"expires,omitzero"`
	Err     string    `json:"err,omitempty"`
	// Excuse (exit) says why an exit with Err still leaves the process's
	// history whole: the race detector's reports, none in dlock's code.
	Excuse string `json:"excuse,omitempty"`
	// Limit (acquire invoke) is a semaphore's permits: the hold may share
	// the name with Limit - 1 others. Shared (acquire invoke) marks a
	// reader's hold of a read-write lock: it may share the name with
	// other readers.
	Limit  int  `json:"limit,omitempty"`
	Shared bool `json:"shared,omitempty"`
}

// recorder appends events to a JSON-lines file, one write per event, so a
// client killed with SIGKILL leaves every event it recorded complete.
type recorder struct {
	proc string
	mu   sync.Mutex
	w    io.Writer
	id   int64
	err  error
}

func newRecorder(proc string, w io.Writer) *recorder { return &recorder{proc: proc, w: w} }

// record stamps e with the time and the recorder's Proc and writes it.
func (r *recorder) record(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Time = time.Now()
	if e.Proc == "" {
		e.Proc = r.proc
	}
	b, err := json.Marshal(e)
	if err == nil {
		_, err = r.w.Write(append(b, '\n'))
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	return e
}

// failed returns the first error met writing the history, if any.
func (r *recorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// nextID returns a fresh operation ID.
func (r *recorder) nextID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id++
	return r.id
}

// ReadHistory reads a history written as JSON lines. A truncated last line
// (a process killed mid-write) is skipped.
func ReadHistory(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	var pendingErr error
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if pendingErr != nil {
			return nil, pendingErr // a bad line that was not the last one
		}
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			pendingErr = fmt.Errorf("history line %d: %w", line, err)
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// WriteHistory writes events as JSON lines.
func WriteHistory(w io.Writer, events []Event) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// mergeHistories reads every *.jsonl file in dir and returns their events
// in time order (stable, so each process's own order is kept).
func mergeHistories(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		evs, err := ReadHistory(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, evs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	return all, nil
}
