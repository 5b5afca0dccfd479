package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dlock/dlock/internal/testenv"
)

func TestBadInputGivesOneLineErrorAndStatus(t *testing.T) {
	dev := sharedDev(t)
	closed := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	noDev := cleanEnv("XDG_RUNTIME_DIR=" + t.TempDir())
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		want int
		says string
	}{
		{"unknown scheme", noDev, []string{"run", "--backend", "nosuch://h", "x", "--", "true"}, exitUsage, `unknown scheme "nosuch"`},
		{"unknown scheme in DLOCK_BACKEND", cleanEnv("DLOCK_BACKEND=nosuch://h"), []string{"list"}, exitUsage, "DLOCK_BACKEND"},
		{"unreachable backend", noDev, []string{"run", "--timeout", "3s", "--backend", "etcd://" + closed, "x", "--", "true"}, exitUnavailable, closed},
		{"unreachable backend, inspect", noDev, []string{"inspect", "--timeout", "3s", "--backend", "etcd://" + closed, "x"}, exitUnavailable, closed},
		{"password never printed", noDev, []string{"run", "--timeout", "3s", "--backend", "etcd://admin:hunter2@" + closed, "x", "--", "true"}, exitUnavailable, "admin:xxxxx@"},
		{"password never printed, bad scheme", noDev, []string{"run", "--backend", "nosuch://admin:hunter2@h", "x", "--", "true"}, exitUsage, "admin:xxxxx@"},
		{"no backend at all", noDev, []string{"run", "x", "--", "true"}, exitUsage, "dlock dev"},
		{"empty name", dev.env(), []string{"run", "", "--", "true"}, exitUsage, "empty"},
		{"empty name, inspect", dev.env(), []string{"inspect", ""}, exitUsage, "empty"},
		{"empty name, break", dev.env(), []string{"break", ""}, exitUsage, "empty"},
		{"name not UTF-8", dev.env(), []string{"run", "\xff", "--", "true"}, exitUsage, "UTF-8"},
		{"missing CMD", dev.env(), []string{"run", "x"}, exitUsage, "missing CMD"},
		{"missing CMD after --", dev.env(), []string{"run", "x", "--"}, exitUsage, "missing CMD"},
		{"missing NAME", dev.env(), []string{"run"}, exitUsage, "missing NAME"},
		{"bad duration", dev.env(), []string{"run", "--ttl", "soon", "x", "--", "true"}, exitUsage, "--ttl"},
		{"negative TTL", dev.env(), []string{"run", "--ttl", "-1s", "x", "--", "true"}, exitUsage, "--ttl"},
		{"TTL below the backend's minimum", dev.env(), []string{"run", "--ttl", "1ms", "x", "--", "true"}, exitUsage, "TTL"},
		{"zero permits", dev.env(), []string{"run", "--limit", "0", "x", "--", "true"}, exitUsage, "--limit: the number of permits must be a whole number from 1 to 10000"},
		{"negative permits", dev.env(), []string{"run", "--limit", "-2", "x", "--", "true"}, exitUsage, "--limit: the number of permits must be"},
		{"too many permits", dev.env(), []string{"run", "--limit", "10001", "x", "--", "true"}, exitUsage, "--limit: the number of permits must be"},
		{"permits not a number", dev.env(), []string{"run", "--limit", "three", "x", "--", "true"}, exitUsage, "--limit: the number of permits must be"},
		{"contradicting flags", dev.env(), []string{"run", "--no-wait", "--wait", "1s", "x", "--", "true"}, exitUsage, "--no-wait"},
		{"unknown flag", dev.env(), []string{"run", "--frobnicate", "x", "--", "true"}, exitUsage, "--frobnicate"},
		{"flag after NAME", dev.env(), []string{"run", "x", "--ttl", "5s", "--", "true"}, exitUsage, "--ttl after NAME"},
		{"flag after NAME, no --", dev.env(), []string{"run", "x", "-v", "true"}, exitUsage, "-v after NAME"},
		{"unknown command", dev.env(), []string{"lock", "x"}, exitUsage, `"lock"`},
		{"mistyped command", dev.env(), []string{"rnu", "x"}, exitUsage, `did you mean "run"?`},
		{"unknown demo", dev.env(), []string{"demo", "bank"}, exitUsage, `"bank"`},
		{"in-process backend for a demo", dev.env(), []string{"demo", "seckill", "--backend", "mem://"}, exitUsage, "separate processes"},
		{"unreachable backend for a demo", dev.env(), []string{"demo", "fencing", "--timeout", "3s", "--backend", "etcd://" + closed}, exitUnavailable, closed},
		{"bad worker count", dev.env(), []string{"demo", "seckill", "--workers", "0"}, exitUsage, "--workers"},
		{"bad key count", dev.env(), []string{"bench", "--keys", "9", "--workers", "2"}, exitUsage, "--keys"},
		{"unknown primitive, bench", noDev, []string{"bench", "--primitive", "barrier"}, exitUsage, `--primitive "barrier": want mutex, semaphore, rwmutex or election`},
		{"--limit without the semaphore, bench", noDev, []string{"bench", "--limit", "3"}, exitUsage, "--limit is the semaphore's"},
		{"bad permits, bench", noDev, []string{"bench", "--primitive", "semaphore", "--limit", "0"}, exitUsage, "--limit: the number of permits must be"},
		{"--readers without the rwmutex, bench", noDev, []string{"bench", "--primitive", "election", "--readers", "0.5"}, exitUsage, "--readers is the read-write lock's"},
		{"bad readers fraction, bench", noDev, []string{"bench", "--primitive", "rwmutex", "--readers", "1.5"}, exitUsage, "--readers 1.5: want a fraction from 0 to 1"},
		{"extra argument", dev.env(), []string{"inspect", "a", "b"}, exitUsage, "NAME"},
		{"unreachable backend, verify", noDev, []string{"verify", "--timeout", "3s", "--yes", "--backend", "etcd://" + closed}, exitUnavailable, closed},
		{"unknown flag, verify", noDev, []string{"verify", "--frobnicate"}, exitUsage, "--frobnicate"},
		{"server fault, verify", noDev, []string{"verify", "--faults", "kill,member-cut", "--backend", "etcd://" + closed}, exitUsage, "make verify"},
		{"unknown flag, bench", noDev, []string{"bench", "--frobnicate"}, exitUsage, "--frobnicate"},
		{"dev given --backend", noDev, []string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--backend", "etcd://" + closed}, exitUsage, "dev runs its own etcd server"},
		{"dev given --backend=URL", noDev, []string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "-backend=etcd://" + closed}, exitUsage, "dev runs its own etcd server"},
		{"--backend before dev", noDev, []string{"--backend", "etcd://" + closed, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, exitUsage, "dev runs its own etcd server"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			r := runDlock(t, tc.env, tc.args...)
			if r.code != tc.want {
				t.Errorf("status %d, want %d\n%s", r.code, tc.want, r)
			}
			msg := strings.TrimSuffix(r.stderr, "\n")
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(msg, "dlock") || !strings.Contains(msg, tc.says) {
				t.Errorf("stderr = %q; want one line that starts with \"dlock\" and says %q", r.stderr, tc.says)
			}
			if strings.Contains(r.stdout+r.stderr, "hunter2") {
				t.Errorf("the password was printed: %s", r)
			}
		})
	}
}

// Help is pure text: it runs in the test process, not through the binary.
func TestHelpOfEveryCommandHasAnExample(t *testing.T) {
	help := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := dlockMain(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"run", "--help"}, {"inspect", "--help"}, {"list", "--help"}, {"break", "--help"},
		{"dev", "--help"}, {"demo", "--help"}, {"demo", "seckill", "--help"}, {"demo", "fencing", "--help"},
		{"bench", "--help"}, {"verify", "--help"}, {"completion", "--help"}, {"help", "run"}, {"run", "-h"},
	} {
		code, out, errs := help(args...)
		if code != 0 || !strings.Contains(out, "Example") || !strings.Contains(out, "Usage:") || errs != "" {
			t.Errorf("dlock %s: status %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, errs, out)
		}
	}
	if _, out, _ := help("help", "demo", "seckill"); !strings.Contains(out, "--workers") {
		t.Errorf("dlock help demo seckill does not show demo seckill's flags:\n%s", out)
	}
	_, out, _ := help("run", "--help")
	if !strings.Contains(out, "\n  -v ") || strings.Contains(out, "--v ") {
		t.Errorf("dlock run --help should show the short flag as -v, not --v:\n%s", out)
	}
	for _, status := range []string{"64", "69", "75", "79", "126, 127"} {
		if !strings.Contains(out, status) {
			t.Errorf("dlock run --help does not document exit status %s", status)
		}
	}
	for _, flag := range []string{"--ttl D", "--wait D", "--no-wait", "--fair", "--grace D", "--backend URL", "--limit N", "DLOCK_LIMIT"} {
		if !strings.Contains(out, flag) {
			t.Errorf("dlock run --help does not list %s", flag)
		}
	}
}

func TestVersionNamesTheBuild(t *testing.T) {
	r := runDlock(t, cleanEnv(), "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("dlock --version: %s; want a line naming dlock and %s", r, runtime.Version())
	}
}
