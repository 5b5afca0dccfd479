package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/testenv"
)

// scrape returns the text of http://addr/metrics.
func scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

// sample returns the value of the sample of metric whose labels include
// every one of labels (each as name="value"); false if there is none.
func sample(text, metric string, labels ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(line, l)
		}
		if !all {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		return v, err == nil
	}
	return 0, false
}

// While "dlock run --metrics-addr" holds a lock, its /metrics shows the
// lease held and the one acquire, with the backend and the lock name.
func TestRunServesMetricsWhileHolding(t *testing.T) {
	dev := sharedDev(t)
	port := strconv.Itoa(testenv.FreePort(t))
	holder := startDlock(t, dev.env(), "run", "--metrics-addr", port, t.Name(), "--", "sleep", "120")
	waitHeld(t, dev.env(), t.Name(), holder.pid())

	name := fmt.Sprintf("dlock_lock_name=%q", t.Name())
	var text string
	testenv.Eventually(t, 30*time.Second, "/metrics to show the held lease", func() error {
		var err error
		if text, err = scrape("127.0.0.1:" + port); err != nil {
			return err
		}
		if v, ok := sample(text, "dlock_lease_held", name, `dlock_backend="etcd"`); !ok || v != 1 {
			return fmt.Errorf("dlock_lease_held = %v (found %v)", v, ok)
		}
		return nil
	})
	if v, ok := sample(text, "dlock_acquire_duration_seconds_count", name, `dlock_outcome="acquired"`); !ok || v != 1 {
		t.Errorf("dlock_acquire_duration_seconds_count{dlock_outcome=\"acquired\"} = %v (found %v), want 1:\n%s", v, ok, text)
	}
	if _, ok := sample(text, "dlock_lease_lost_total"); ok {
		t.Errorf("a loss is counted while the lease is held:\n%s", text)
	}
}

// A holder paused past its TTL (SIGSTOP) finds on waking that its lease
// ran out: /metrics counts the loss with cause expired — not broken, not
// unreachable — and no lease held, while CMD (which ignores SIGTERM)
// keeps dlock in its --grace.
func TestRunMetricsCountAPausedHoldersLossAsExpired(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	port := strconv.Itoa(testenv.FreePort(t))
	holder := startDlock(t, dev.env(), append([]string{"run", "--ttl", "2s", "--grace", "20s", "--metrics-addr", port, t.Name(), "--"}, leaseLostScript(dir, true)...)...)
	waitHeld(t, dev.env(), t.Name(), holder.pid())
	name := fmt.Sprintf("dlock_lock_name=%q", t.Name())
	testenv.Eventually(t, 30*time.Second, "a confirmed renewal", func() error {
		text, err := scrape("127.0.0.1:" + port)
		if err != nil {
			return err
		}
		if v, _ := sample(text, "dlock_renewal_duration_seconds_count", name); v < 1 {
			return fmt.Errorf("dlock_renewal_duration_seconds_count = %v", v)
		}
		return nil
	})

	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Granted once the backend expired the paused holder's lease.
	if r := runDlock(t, dev.env(), "run", "--wait", "60s", t.Name(), "--", "true"); r.code != 0 {
		t.Fatalf("the lock of a paused holder was not freed after its TTL: %s", r)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var text string
	// The series can be scraped, at 0, before the resumed process has
	// run its expiry check: wait for a lease to have ended.
	testenv.Eventually(t, 15*time.Second, "/metrics to count the loss", func() error {
		var err error
		if text, err = scrape("127.0.0.1:" + port); err != nil {
			return err
		}
		if v, _ := sample(text, "dlock_lease_duration_seconds_count", name); v < 1 {
			return errors.New("no lease ended yet")
		}
		return nil
	})
	if v, ok := sample(text, "dlock_lease_lost_total", name, `dlock_loss_cause="expired"`); !ok || v != 1 {
		t.Errorf("dlock_lease_lost_total{dlock_loss_cause=\"expired\"} = %v (found %v), want 1:\n%s", v, ok, grepLines(text, "dlock_lease_lost_total"))
	}
	if v, ok := sample(text, "dlock_lease_held", name); !ok || v != 0 {
		t.Errorf("dlock_lease_held after the loss = %v (found %v), want 0", v, ok)
	}
	if v, ok := sample(text, "dlock_lease_duration_seconds_count", name, `dlock_lease_end="lost"`); !ok || v != 1 {
		t.Errorf("dlock_lease_duration_seconds_count{dlock_lease_end=\"lost\"} = %v (found %v), want 1", v, ok)
	}
}

// grepLines returns the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// "dlock dev --metrics-addr" serves its embedded etcd server's metrics.
func TestDevServesEtcdMetrics(t *testing.T) {
	dir := t.TempDir()
	port := strconv.Itoa(testenv.FreePort(t))
	xdg := filepath.Join(dir, "run")
	d, err := startDevIn(cleanEnv("XDG_RUNTIME_DIR="+xdg), filepath.Join(xdg, "dlock", "dev.url"),
		"--data-dir", filepath.Join(dir, "data"), "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--metrics-addr", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	text, err := scrape("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := sample(text, "etcd_server_has_leader"); !ok || v != 1 {
		t.Errorf("etcd_server_has_leader = %v (found %v), want 1", v, ok)
	}
}

// "dlock ui --metrics-addr" serves /metrics beside the dashboard: the
// process's own metrics, and dlock's for the locks its Break button takes.
func TestUIServesMetrics(t *testing.T) {
	dev := sharedDev(t)
	port := strconv.Itoa(testenv.FreePort(t))
	startUI(t, dev.env(), "--metrics-addr", port)
	text, err := scrape("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := sample(text, "go_goroutines"); !ok || v < 1 {
		t.Errorf("go_goroutines = %v (found %v), want at least 1", v, ok)
	}
}

// --metrics-addr takes the bind-safety rule of dlock dev's --listen: an
// address other machines can reach needs --allow-remote.
func TestMetricsAddrRefusesNonLoopbackWithoutAllowRemote(t *testing.T) {
	dev := sharedDev(t)
	port := strconv.Itoa(testenv.FreePort(t))
	for _, args := range [][]string{
		{"run", "--metrics-addr", "0.0.0.0:" + port, t.Name(), "--", "true"},
		{"run", "--metrics-addr", ":" + port, t.Name(), "--", "true"},
		{"bench", "--metrics-addr", "0.0.0.0:" + port, "--duration", "100ms"},
		{"dev", "--metrics-addr", "0.0.0.0:" + port, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()},
		{"ui", "--metrics-addr", "0.0.0.0:" + port, "--listen", "127.0.0.1:0"},
	} {
		r := runDlock(t, dev.env(), args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--allow-remote") {
			t.Errorf("dlock %s: %s; want status %d naming --allow-remote", strings.Join(args, " "), r, exitUsage)
		}
	}
	if _, err := scrape("127.0.0.1:" + port); err == nil {
		t.Error("something serves /metrics on the refused address")
	}
}
