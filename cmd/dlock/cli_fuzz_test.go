package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// knownGood are command lines that must parse, with the command they name
// and the arguments left for it.
var knownGood = []struct {
	args    []string
	command string
	rest    []string
	backend string
}{
	{[]string{"run", "backup", "--", "./backup.sh"}, "run", []string{"backup", "--", "./backup.sh"}, ""},
	{[]string{"--backend", "redis://127.0.0.1:6379/0", "list"}, "list", []string{}, "redis://127.0.0.1:6379/0"},
	{[]string{"--backend=etcd://h1:2379,h2:2379", "inspect", "orders/42"}, "inspect", []string{"orders/42"}, "etcd://h1:2379,h2:2379"},
	{[]string{"-backend", "mem://", "break", "x"}, "break", []string{"x"}, "mem://"},
	{[]string{"demo", "seckill", "--workers", "8"}, "demo", []string{"seckill", "--workers", "8"}, ""},
	{[]string{"bench", "--json"}, "bench", []string{"--json"}, ""},
	{[]string{"dev", "--listen", "127.0.0.1:0"}, "dev", []string{"--listen", "127.0.0.1:0"}, ""},
	{[]string{"ui", "--listen", "127.0.0.1:0", "--allow-break"}, "ui", []string{"--listen", "127.0.0.1:0", "--allow-break"}, ""},
	{[]string{"help", "run"}, "help", []string{"run"}, ""},
	{[]string{"--", "list", "a/"}, "list", []string{"a/"}, ""},
	{[]string{"verify", "--backend", "zk://127.0.0.1:2181/x", "--clients", "8", "--duration", "30s", "--faults", "none"}, "verify",
		[]string{"--backend", "zk://127.0.0.1:2181/x", "--clients", "8", "--duration", "30s", "--faults", "none"}, ""},
}

func TestKnownGoodCommandLinesParse(t *testing.T) {
	for _, tc := range knownGood {
		var stdout, stderr bytes.Buffer
		env := &cmdEnv{stdout: &stdout, stderr: &stderr, name: "dlock"}
		c, rest, err := parseCommandLine(env, tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if c.name != tc.command || !slices.Equal(rest, tc.rest) || env.backend != tc.backend {
			t.Errorf("%q: command %q, arguments %q, backend %q; want %q, %q, %q", tc.args, c.name, rest, env.backend, tc.command, tc.rest, tc.backend)
		}
		if stdout.Len()+stderr.Len() > 0 {
			t.Errorf("%q: parsing printed %q %q", tc.args, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	a, err := parseVerifyArgs(&cmdEnv{stdout: &stdout, stderr: &stderr}, knownGood[len(knownGood)-1].rest)
	if err != nil {
		t.Fatal(err)
	}
	if a.bf.url != "zk://127.0.0.1:2181/x" || a.clients != 8 || a.duration != 30*time.Second || len(a.runs) != 1 {
		t.Errorf("dlock verify parsed as %+v", a)
	}
}

// FuzzCommandLine feeds arbitrary argument vectors (NUL-separated) to the
// command-line parsing that main does before running a command, and to
// dlock verify's: it must never panic, a usage error must exit with status
// 64 and say why on stderr, --help must print help and exit with 0, and
// what dlock verify accepts must keep its documented limits.
func FuzzCommandLine(f *testing.F) {
	for _, tc := range knownGood {
		f.Add(strings.Join(tc.args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		var stdout, stderr bytes.Buffer
		env := &cmdEnv{stdout: &stdout, stderr: &stderr, name: "dlock"}
		c, rest, err := parseCommandLine(env, args)
		if err == nil {
			if c.name == "" || c.run == nil {
				t.Fatalf("%q parsed into no command", args)
			}
			if c.name != "verify" {
				return
			}
			env.name = "dlock verify"
			var a *verifyArgs
			if a, err = parseVerifyArgs(env, rest); err == nil {
				if a.clients < 2 || a.clients > 64 || a.ttl <= 0 || a.bound <= 0 || a.duration/5 < a.ttl || len(a.runs) == 0 {
					t.Fatalf("%q: dlock verify accepted %+v", args, a)
				}
				return
			}
		}
		switch st := report(env, err); st {
		case 0:
			if stdout.Len() == 0 || stderr.Len() > 0 {
				t.Fatalf("%q: status 0 (help) with stdout %q, stderr %q", args, stdout.String(), stderr.String())
			}
		case exitUsage:
			if strings.TrimSpace(stderr.String()) == "" {
				t.Fatalf("%q: status 64 without a message on stderr", args)
			}
		default:
			t.Fatalf("%q: status %d (%v), want 64 for a usage error", args, st, err)
		}
	})
}
