package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/internal/testenv"
)

// verifyRedis runs dlock verify against a real Redis under faults (a
// --faults list), with a short TTL and bound so that it ends in well under a
// minute, while deleteKeys (if set) runs.
func verifyRedis(t *testing.T, faults string, deleteKeys func(ctx context.Context, rdb *redis.Client)) result {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if deleteKeys != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deleteKeys(ctx, rdb)
		}()
	}
	r := runDlock(t, cleanEnv(), "verify", "--backend", "redis://"+srv.Addr+"/0", "--faults", faults,
		"--clients", "3", "--ttl", "1s", "--bound", "2s", "--duration", "10s", "--yes")
	cancel()
	wg.Wait()
	return r
}

// evict deletes dlock's lock keys (not the fence counters) again and again,
// as an eviction policy or an operator's FLUSH would: every lease then
// held is gone from the server while its holder still believes in it. The
// loop ends with ctx, or after two minutes at most.
func evict(ctx context.Context, rdb *redis.Client) {
	for range 600 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		octx, cancel := context.WithTimeout(ctx, time.Second)
		keys, err := rdb.Keys(octx, "dlock:*:lock").Result()
		if err == nil && len(keys) > 0 {
			rdb.Del(octx, keys...)
		}
		cancel()
	}
}

// TestVerifyCatchesARedisThatLosesLocks: dlock verify against a Redis whose
// lock keys are deleted during the fault runs must fail and say why: the
// older holders noticed their loss only after the next grant. The same run
// without the deletions passes, and so does a Break of a cut-off holder's
// lock (break-partition), whose overlaps only the Break excuses.
func TestVerifyCatchesARedisThatLosesLocks(t *testing.T) {
	r := verifyRedis(t, "kill,net", evict)
	t.Logf("with the keys deleted:\n%s", r.stdout)
	if r.code != exitViolation || !strings.Contains(r.stdout, "verdict: FAIL") || !strings.Contains(r.stdout, "exclusion: ") {
		t.Fatalf("dlock verify passed a Redis that loses its locks:\n%s", r)
	}
	if !strings.Contains(r.stdout, "Done closed late") && !strings.Contains(r.stdout, "only when its release was refused") {
		t.Errorf("the violation does not say that the older holder noticed its loss late:\n%s", r.stdout)
	}
	if r = verifyRedis(t, "kill,net,break-partition", nil); r.code != 0 || !strings.Contains(r.stdout, "verdict: PASS") {
		t.Fatalf("dlock verify failed a healthy Redis:\n%s", r)
	}
	if !regexp.MustCompile(`× break-partition: PASS;.*\n  excused overlaps: \d+ break\n`).MatchString(r.stdout) {
		t.Errorf("the break-partition run is missing, or no overlap was excused by the Break:\n%s", r.stdout)
	}
}

// TestVerifyThatFailsItselfIsNotAViolation: a verify run that breaks
// (here: the history cannot be written) exits 70, not 1, which a script
// would read as "the backend violated its guarantees"; bench against an
// unreachable backend exits 69. (Bad flags, and verify against an unreachable
// backend, are in TestBadInputGivesOneLineErrorAndStatus.)
func TestVerifyThatFailsItselfIsNotAViolation(t *testing.T) {
	srv := testenv.StartRedis(t)
	missing := filepath.Join(t.TempDir(), "no-such-dir", "history.jsonl")
	r := runDlock(t, cleanEnv(), "verify", "--backend", "redis://"+srv.Addr+"/0", "--faults", "none",
		"--clients", "2", "--ttl", "200ms", "--bound", "1s", "--duration", "1s", "--history", missing, "--yes")
	if r.code != exitToolFailed || !strings.Contains(r.stderr, "write the history") {
		t.Errorf("verify that could not write its history: %s; want status %d and the reason", r, exitToolFailed)
	}
	// bench says what it will write before it connects: not one line, so
	// not in that table.
	closed := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	r = runDlock(t, cleanEnv(), "bench", "--timeout", "3s", "--yes", "--workers", "1", "--backend", "etcd://"+closed)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, closed) {
		t.Errorf("bench against an unreachable backend: %s; want status %d", r, exitUnavailable)
	}
}

// TestVerifySemaphoreWorkload: dlock verify --workload semaphore runs a
// semaphore of 2 on a real Redis under kill and passes, with the table
// saying so and at most 2 holders at once; the compat=setnx layout, which
// has no semaphores, is refused before any process starts.
func TestVerifySemaphoreWorkload(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := runDlock(t, cleanEnv(), "verify", "--backend", "redis://"+srv.Addr+"/0", "--workload", "semaphore", "--limit", "2",
		"--faults", "none,kill", "--clients", "4", "--ttl", "1s", "--bound", "2s", "--duration", "10s", "--yes")
	if r.code != 0 || !regexp.MustCompile(`(?m)^redis\s+semaphore 2\s+kill\s+\d+\s+\d+\s+2\s+0\s`).MatchString(r.stdout) {
		t.Fatalf("verify --workload semaphore --limit 2: %s; want status 0 and a kill row with 2 held at most and no overlap", r)
	}
	r = runDlock(t, cleanEnv(), "verify", "--backend", "redis://"+srv.Addr+"/0?compat=setnx", "--workload", "semaphore", "--yes")
	if r.code != exitUsage || !strings.Contains(r.stderr, "does not offer it") {
		t.Errorf("verify --workload semaphore on compat=setnx: %s; want status %d and the reason", r, exitUsage)
	}
	r = runDlock(t, cleanEnv(), "verify", "--workload", "queue")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--workload "queue"`) {
		t.Errorf("verify --workload queue: %s; want status %d naming the flag", r, exitUsage)
	}
}
