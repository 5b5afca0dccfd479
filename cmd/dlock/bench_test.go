package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock/dlock/internal/testenv"
)

// TestBenchMeasuresEachPrimitive runs dlock bench with each primitive but
// the mutex (TestBenchReportsThroughputLatencyAndNoViolations has that) and
// checks that its figures are there, in JSON and in the table; the figures'
// values are speeds, and are not checked.
func TestBenchMeasuresEachPrimitive(t *testing.T) {
	dev := sharedDev(t)
	for _, tc := range []struct {
		primitive string
		args      []string
		header    string // the table's figures of this primitive
	}{
		{"semaphore", []string{"--limit", "2"}, `(?m)^PHASE\s+KEYS\s+GRANTS\s+GRANTS/S\s+HELD mean\s+max\s+ACQUIRE p50`},
		{"rwmutex", []string{"--readers", "0.5"}, `(?m)^PHASE\s+KEYS\s+GRANTS\s+GRANTS/S\s+READS/S\s+WRITES/S\s+READ WAIT p50\s+p99\s+max\s+WRITE WAIT p50\s+p99\s+max`},
		{"election", nil, `(?m)^PHASE\s+KEYS\s+TERMS\s+TERMS/S\s+CAMPAIGN p50`},
	} {
		args := append([]string{"bench", "--backend", dev.url, "--primitive", tc.primitive, "--workers", "4", "--duration", "1s", "--json"}, tc.args...)
		r := runDlock(t, dev.env(), args...)
		var rep benchReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
			t.Fatalf("bench --primitive %s --json: %v %s", tc.primitive, err, r)
		}
		if rep.Primitive != tc.primitive || len(rep.Phases) != 2 {
			t.Fatalf("bench --primitive %s --json: primitive %q, %d phases; want %q and 2", tc.primitive, rep.Primitive, len(rep.Phases), tc.primitive)
		}
		for _, p := range rep.Phases {
			if p.Grants == 0 || p.Violations != 0 || p.Errors != 0 || p.Acquire.Samples != p.Grants {
				t.Errorf("%s, phase %s: %+v", tc.primitive, p.Phase, p)
			}
			isSem, isRW := tc.primitive == "semaphore", tc.primitive == "rwmutex"
			if (p.PermitsHeldMean != nil) != isSem || (p.PermitsHeldMax != nil) != isSem {
				t.Errorf("%s, phase %s: permits held %v, %v; want them for the semaphore only", tc.primitive, p.Phase, p.PermitsHeldMean, p.PermitsHeldMax)
			}
			if isSem && (*p.PermitsHeldMax < 1 || *p.PermitsHeldMax > 2 || *p.PermitsHeldMean <= 0 || *p.PermitsHeldMean > 2) {
				t.Errorf("semaphore of 2, phase %s: permits held mean %v, max %d; want within 1..2", p.Phase, *p.PermitsHeldMean, *p.PermitsHeldMax)
			}
			if (p.Reads != nil) != isRW || (p.Writes != nil) != isRW || (p.WriteAcquire != nil) != isRW {
				t.Errorf("%s, phase %s: reads %v, writes %v, write acquire %v; want them for the rwmutex only", tc.primitive, p.Phase, p.Reads, p.Writes, p.WriteAcquire)
			}
			if isRW && (*p.Reads == 0 || *p.Writes == 0 || *p.Reads+*p.Writes != p.Grants || p.WriteAcquire.Samples != *p.Writes || p.ReadAcquire.Samples != *p.Reads) {
				t.Errorf("rwmutex, 2 readers and 2 writers, phase %s: %d reads, %d writes of %d grants; want both, adding up", p.Phase, *p.Reads, *p.Writes, p.Grants)
			}
		}
		if (rep.Limit != nil) != (tc.primitive == "semaphore") || rep.Limit != nil && *rep.Limit != 2 {
			t.Errorf("%s: limit %v; want 2 for the semaphore, null for the others", tc.primitive, rep.Limit)
		}
		if (rep.Readers != nil) != (tc.primitive == "rwmutex") || rep.Readers != nil && *rep.Readers != 0.5 {
			t.Errorf("%s: readers %v; want 0.5 for the rwmutex, null for the others", tc.primitive, rep.Readers)
		}
		// null, never left out, for what a primitive does not measure
		var raw struct{ Phases []map[string]any }
		if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"permits_held_mean", "permits_held_max", "reads", "reads_per_sec", "read_acquire", "writes", "writes_per_sec", "write_acquire"} {
			if _, ok := raw.Phases[0][key]; !ok {
				t.Errorf("%s --json: %q left out; want it, null where not measured", tc.primitive, key)
			}
		}

		args = append([]string{"bench", "--backend", dev.url, "--primitive", tc.primitive, "--workers", "4", "--duration", "300ms"}, tc.args...)
		r = runDlock(t, dev.env(), args...)
		if r.code != 0 || !regexp.MustCompile(tc.header).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^contended\s+1\s+\d+`).MatchString(r.stdout) {
			t.Errorf("bench --primitive %s table: %s; want a header matching %s", tc.primitive, r, tc.header)
		}
	}
}

// TestBenchRefusesAPrimitiveTheBackendLacks: etcd in the etcdctl layout has
// no semaphores and no read-write locks; bench says so with the library's
// error and status 64, and measures nothing. The election works everywhere.
func TestBenchRefusesAPrimitiveTheBackendLacks(t *testing.T) {
	dev := sharedDev(t)
	env := cleanEnv("DLOCK_BACKEND="+dev.url+"?compat=etcdctl", "TMPDIR="+t.TempDir())
	for primitive, want := range map[string]string{
		"semaphore": "--primitive semaphore: backend etcd://",
		"rwmutex":   "--primitive rwmutex: backend etcd://",
	} {
		r := runDlock(t, env, "bench", "--yes", "--primitive", primitive, "--workers", "2", "--duration", "300ms")
		if r.code != exitUsage || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "not supported by this backend") || strings.Contains(r.stdout, "PHASE") {
			t.Errorf("bench --primitive %s on a backend without it: %s; want status %d and %q with the library's error", primitive, r, exitUsage, want)
		}
	}
	if r := runDlock(t, env, "bench", "--yes", "--primitive", "semaphore", "--limit", "1", "--workers", "2", "--duration", "300ms"); r.code != 0 {
		t.Errorf("bench --primitive semaphore --limit 1 (a mutex) in the etcdctl layout: %s; want status 0", r)
	}
	if r := runDlock(t, env, "bench", "--yes", "--primitive", "election", "--workers", "2", "--duration", "300ms"); r.code != 0 || !strings.Contains(r.stdout, "TERMS/S") {
		t.Errorf("bench --primitive election in the etcdctl layout: %s; want status 0 and the terms", r)
	}
}

// TestBenchFairAsksForArrivalOrder: --fair measures the fair mode where
// the backend has one (etcd: every worker gets its turn, the JSON says
// "fair": true), and is refused with the library's error and status 64 on
// a backend without one (Redis in the setnx layout), measuring nothing.
func TestBenchFairAsksForArrivalOrder(t *testing.T) {
	dev := sharedDev(t)
	// 2s per phase: each of the 4 workers must get a turn in the contended
	// phase, which took 3 grants in 500ms on a machine loaded to 15.
	r := runDlock(t, dev.env(), "bench", "--backend", dev.url, "--fair", "--workers", "4", "--duration", "2s", "--json")
	var rep benchReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || !rep.Fair || len(rep.Phases) != 2 || rep.Phases[1].MinGrants < 1 {
		t.Fatalf("bench --fair on etcd: %s; want status 0, \"fair\": true and every worker granted in the contended phase", r)
	}
	r = runDlock(t, dev.env(), "bench", "--backend", dev.url, "--fair", "--workers", "2", "--duration", "300ms")
	if r.code != 0 || !strings.Contains(r.stdout, "granted in arrival order (--fair)") {
		t.Errorf("bench --fair table: %s; want it to say the grants were fair", r)
	}
	srv := testenv.StartRedis(t)
	r = runDlock(t, cleanEnv(), "bench", "--yes", "--backend", "redis://"+srv.Addr+"/0?compat=setnx", "--fair", "--workers", "2", "--duration", "300ms")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not supported by this backend") || strings.Contains(r.stdout, "PHASE") {
		t.Errorf("bench --fair on Redis compat=setnx: %s; want status %d and the library's error", r, exitUsage)
	}
}
