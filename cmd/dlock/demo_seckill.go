package main

import (
	"bufio"
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
	"strconv"
	"strings"
	"time"

	"github.com/dlock/dlock"
)

const seckillUsage = `Usage:
  dlock demo seckill [flags]

The flash sale ("seckill"): a stock of K items in a store that N worker
processes share, and every worker tries to buy one at the same moment. Each
reads the stock, pauses 20-50 ms (the window in which the others read the
same number), and writes stock-1 if it saw stock > 0.

Without the lock (--no-lock) several workers see the last item and all of
them buy it: "sold 4 of 1". With the lock around the read-check-write, it
sells exactly K, and the fencing tokens show the order of the grants. dlock
exits with status 1 whenever more than K were sold.

The workers are separate processes (this binary, run again); they all wait
at a start barrier and are released together, so that they really race.

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock demo seckill                 # sells exactly 1 of 1
  dlock demo seckill --no-lock       # usually oversells
  dlock demo seckill --workers 32 --stock 5
`

const seckillWorkerCmd = "_seckill-worker"

// seckillResult is what a worker reports on its stdout, as one JSON line.
type seckillResult struct {
	ID     int           `json:"id"`
	PID    int           `json:"pid"`
	Token  uint64        `json:"token,omitempty"`
	Waited time.Duration `json:"waited"`
	Saw    int           `json:"saw"`
	Bought bool          `json:"bought"`
	Err    string        `json:"error,omitempty"`
}

func seckillCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock demo seckill", seckillUsage, env.stdout)
	bf.register(fs)
	workers := fs.Int("workers", 16, "number of worker `processes`")
	stock := fs.Int("stock", 1, "items in stock at the start")
	noLock := fs.Bool("no-lock", false, "race without the lock, to see the oversell")
	store := fs.String("store", "", "the store: a `FILE` holding the stock count, overwritten with --stock (default: a temporary file)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	case *workers < 1 || *workers > 1000:
		return usageErrorf("--workers %d: want 1 to 1000 processes", *workers)
	case *stock < 0:
		return usageErrorf("--stock %d: must not be negative", *stock)
	}

	storePath := *store
	if storePath == "" {
		dir, err := os.MkdirTemp("", "dlock-seckill-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		storePath = filepath.Join(dir, "stock")
	}
	storePath, err := filepath.Abs(storePath)
	if err != nil {
		return usageErrorf("--store %s: %v", *store, err)
	}
	if err := writeStock(storePath, *stock); err != nil {
		return usageErrorf("--store: %v", err)
	}

	// The lock is named after the store it protects, so that two runs
	// sharing a store (and a backend) also exclude each other.
	name := "seckill" + storePath
	var b *backend
	if !*noLock {
		if b, err = bf.ownOrEmbedded(ctx, env, env.stderr); err != nil {
			return err
		}
		defer b.Close()
		if err := bf.checkShared(ctx, b); err != nil {
			return err
		}
	}

	results, err := raceWorkers(ctx, b, *workers, name, storePath)
	if err != nil {
		return err
	}
	left, err := readStock(storePath)
	if err != nil {
		return err
	}
	return seckillReport(env.stdout, b, name, *stock, left, results)
}

// raceWorkers starts the worker processes, waits until every one is ready,
// releases them together, and collects their results.
func raceWorkers(ctx context.Context, b *backend, n int, name, store string) ([]seckillResult, error) {
	barrierR, barrierW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer barrierW.Close()
	cmds := make([]*exec.Cmd, n)
	defer killAll(cmds)
	ready := make(chan error, n)
	results := make(chan seckillResult, n)
	for i := range n {
		args := []string{seckillWorkerCmd, "--id", strconv.Itoa(i + 1), "--name", name, "--store", store}
		if b == nil {
			args = append(args, "--no-lock")
		}
		cmd, err := selfCommand(b, args...)
		if err != nil {
			return nil, err
		}
		cmd.ExtraFiles = []*os.File{barrierR} // fd 3: EOF when the race starts
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start worker %d: %w", i+1, err)
		}
		cmds[i] = cmd
		go func() {
			sc := bufio.NewScanner(out)
			if !sc.Scan() || sc.Text() != "ready" {
				ready <- fmt.Errorf("worker %d (pid %d) did not get ready: %q", i+1, cmd.Process.Pid, sc.Text())
			} else {
				ready <- nil
			}
			r := seckillResult{ID: i + 1, PID: cmd.Process.Pid, Err: "exited without a result"}
			if sc.Scan() {
				var got seckillResult
				if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
					r.Err = fmt.Sprintf("unreadable result %q", sc.Text())
				} else {
					r = got
				}
			}
			io.Copy(io.Discard, out)
			if err := cmd.Wait(); err != nil && r.Err == "" {
				r.Err = err.Error()
			}
			results <- r
		}()
	}
	barrierR.Close() // the workers hold it now
	timeout := time.After(seckillRunLimit)
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout:
			return nil, errors.New("the workers did not all get ready within 2 minutes")
		}
	}
	barrierW.Close() // go!
	var out []seckillResult
	for range n {
		select {
		case r := <-results:
			out = append(out, r)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout:
			return nil, errors.New("the workers did not all finish within 2 minutes")
		}
	}
	return out, nil
}

func seckillReport(w io.Writer, b *backend, name string, stock, left int, results []seckillResult) error {
	locked := b != nil
	if locked {
		slices.SortFunc(results, func(x, y seckillResult) int { return cmpInts(x.Token, y.Token, x.ID, y.ID) })
	} else {
		slices.SortFunc(results, func(x, y seckillResult) int { return x.ID - y.ID })
	}
	fmt.Fprintf(w, "dlock demo seckill: %d worker processes race to buy from a stock of %d.\n", len(results), stock)
	fmt.Fprintf(w, "Each reads the stock, pauses 20-50 ms, and buys if it saw stock > 0 — ")
	if locked {
		fmt.Fprintf(w, "holding the lock %q\non %s.\n\n", name, b)
	} else {
		fmt.Fprintf(w, "WITHOUT a lock.\n\n")
	}
	t := newTable(w)
	fmt.Fprintln(t, "WORKER\tPID\tTOKEN\tWAITED\tSAW\tRESULT")
	sold, failed := 0, 0
	var buyers []string
	for _, r := range results {
		token, result := "-", "sold out"
		if locked && r.Token != 0 {
			token = strconv.FormatUint(r.Token, 10)
		}
		switch {
		case r.Err != "":
			result = "error: " + r.Err
			failed++
		case r.Bought:
			result = "bought"
			sold++
			buyers = append(buyers, strconv.Itoa(r.ID))
		}
		waited := "-"
		if locked {
			waited = round(r.Waited).String()
		}
		fmt.Fprintf(t, "%d\t%d\t%s\t%s\t%d\t%s\n", r.ID, r.PID, token, waited, r.Saw, result)
	}
	t.Flush()
	fmt.Fprintf(w, "\nsold %d of %d (stock left in the store: %d)", sold, stock, left)
	switch {
	case sold > stock:
		who := "workers " + strings.Join(buyers, ", ")
		if len(buyers) == len(results) {
			who = fmt.Sprintf("all %d workers", len(buyers))
		}
		fmt.Fprintf(w, " — OVERSOLD by %d:\n%s bought, each having read the stock before the others wrote it back.\n", sold-stock, who)
	case !locked:
		fmt.Fprintf(w, " — no oversell this time: the race depends on timing; run it again.\n")
	default:
		fmt.Fprintf(w, " — exactly right: the lock let one read-check-write run at a time, in token order.\n")
	}
	switch {
	case sold > stock:
		return fmt.Errorf("oversold: sold %d of %d", sold, stock)
	case failed > 0:
		return fmt.Errorf("%d of %d workers failed", failed, len(results))
	}
	return nil
}

func cmpInts(a, b uint64, c, d int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return c - d
}

func readStock(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("store %s: %w", path, err)
	}
	return n, nil
}

// writeStock replaces the store's content atomically, so that a reader never
// sees a half-written file (the race shown is the read-check-write one).
func writeStock(path string, n int) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// The seckill demo's bounds: generous, so that a slow machine or backend
// shows in the report as waits, not as failures.
const (
	// seckillRunLimit bounds the whole sale, every worker included.
	seckillRunLimit = 2 * time.Minute
	// seckillOpenTimeout bounds a worker's dlock.Open.
	seckillOpenTimeout = 30 * time.Second
	// seckillTTL is the lease of a buyer: far above a purchase's few
	// milliseconds, so that no lease runs out during one.
	seckillTTL = 10 * time.Second
	// seckillLockTimeout bounds a buyer's wait for its turn: up to 1000
	// workers queue, each holding for tens of milliseconds.
	seckillLockTimeout = time.Minute
	// seckillUnlockTimeout bounds a buyer's Unlock.
	seckillUnlockTimeout = 10 * time.Second
)

// seckillWorker is one buyer: a process started by "dlock demo seckill".
func seckillWorker(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(seckillWorkerCmd, "", env.stdout)
	id := fs.Int("id", 0, "")
	name := fs.String("name", "", "")
	store := fs.String("store", "", "")
	noLock := fs.Bool("no-lock", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	res := seckillResult{ID: *id, PID: os.Getpid()}
	report := func() error { return json.NewEncoder(env.stdout).Encode(res) }
	var m *dlock.Mutex
	if !*noLock {
		cctx, cancel := context.WithTimeout(ctx, seckillOpenTimeout)
		defer cancel()
		c, err := dlock.Open(cctx, os.Getenv("DLOCK_BACKEND"))
		if err == nil {
			defer c.Close()
			_, err = c.Inspect(cctx, *name) // connected before the race starts
		}
		if err != nil {
			fmt.Fprintln(env.stdout, "ready")
			res.Err = oneLine(err)
			return report()
		}
		m = c.Mutex(*name, dlock.WithTTL(seckillTTL))
	}
	fmt.Fprintln(env.stdout, "ready")
	io.Copy(io.Discard, os.NewFile(3, "barrier")) // EOF: the race starts

	start := time.Now()
	var lease *dlock.Lease
	if m != nil {
		lctx, cancel := context.WithTimeout(ctx, seckillLockTimeout)
		defer cancel()
		l, err := m.Lock(lctx)
		if err != nil {
			res.Err = oneLine(err)
			return report()
		}
		lease, res.Token = l, l.Token()
	}
	res.Waited = time.Since(start)
	n, err := readStock(*store)
	if err != nil {
		res.Err = oneLine(err)
		return report()
	}
	res.Saw = n
	time.Sleep(time.Duration(20+rand.IntN(31)) * time.Millisecond) // the window
	if n > 0 && (lease == nil || lease.Err() == nil) {
		if err := writeStock(*store, n-1); err != nil {
			res.Err = oneLine(err)
			return report()
		}
		res.Bought = true
	}
	if lease != nil {
		uctx, cancel := context.WithTimeout(ctx, seckillUnlockTimeout)
		defer cancel()
		if err := lease.Unlock(uctx); err != nil {
			res.Err = oneLine(err)
		}
	}
	return report()
}
