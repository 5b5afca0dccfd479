package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/dlock/dlock/internal/testenv"
)

// uiProc is a running "dlock ui".
type uiProc struct {
	url string // http://127.0.0.1:PORT/
	out *lockedBuffer
}

// startUI runs "dlock ui args…" on a free loopback port and returns once
// it says where it serves.
func startUI(t *testing.T, env []string, args ...string) *uiProc {
	t.Helper()
	cmd := dlockCmd(env, append([]string{"ui", "--listen", "127.0.0.1:0"}, args...)...)
	u := &uiProc{out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = u.out, u.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	serving := regexp.MustCompile(`serving (http://\S+/) `)
	testenv.Eventually(t, 30*time.Second, "dlock ui to say where it serves", func() error {
		select {
		case <-done:
			return testenv.Final(fmt.Errorf("dlock ui exited: %s", u.out.String()))
		default:
		}
		m := serving.FindStringSubmatch(u.out.String())
		if m == nil {
			return fmt.Errorf("output so far: %q", u.out.String())
		}
		u.url = m[1]
		return nil
	})
	return u
}

// post sends a break request as a page would, with key (if not "").
func (u *uiProc) postBreak(t *testing.T, key, name string, token uint64) (int, string) {
	t.Helper()
	body, _ := json.Marshal(uiBreakRequest{Name: name, Token: token})
	req, _ := http.NewRequest("POST", u.url+"break", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Dlock-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// source is the page as served.
func (u *uiProc) source(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(u.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var pageKey = regexp.MustCompile(`<meta name="dlock-key" content="([0-9a-f]+)">`)

// browser is a headless Debian chromium driven through the DevTools
// protocol. Dialogs (Break's confirmation, or an alert a script injected
// through a lock name would open) are accepted and recorded.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	dialogs []string
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium", "scripts/install-chromium.sh", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests may run as root, where chromium's sandbox refuses to start
		chromedp.WindowSize(1280, 860),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	br := &browser{ctx: ctx}
	// The first Run starts chromium; it must not have a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	// The page waits for a dialog, and so does the action that opened it:
	// another goroutine answers.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			br.mu.Lock()
			br.dialogs = append(br.dialogs, string(ev.Type)+": "+ev.Message)
			br.mu.Unlock()
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	return br
}

func (br *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	run(t, br, chromedp.Steps(steps...))
}

// run runs one action in the page and returns its value.
func run[T any](t *testing.T, br *browser, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

// eval evaluates the JavaScript expression js in the page.
func eval[T any](t *testing.T, br *browser, js string) T {
	t.Helper()
	return run(t, br, chromedp.Evaluate[T](js))
}

// click clicks the element css selects, found and clicked in one step of
// the page's script. The page rebuilds its table at each update, so a node
// that chromedp.Click has found can be gone before its click is dispatched
// ("Could not find node with given id").
func (br *browser) click(t *testing.T, css string) {
	t.Helper()
	sel, _ := json.Marshal(css)
	testenv.Eventually(t, 20*time.Second, "the page to show "+css, func() error {
		if !eval[bool](t, br, `(() => { const e = document.querySelector(`+string(sel)+`); if (!e) return false; e.click(); return true })()`) {
			return errors.New("not shown")
		}
		return nil
	})
}

func (br *browser) seenDialogs() []string {
	br.mu.Lock()
	defer br.mu.Unlock()
	return append([]string(nil), br.dialogs...)
}

// pageRow is a row of the page's lock table, as the browser shows it.
type pageRow struct {
	Key                          string // the row's data-name: the lock's name
	Name, Holder, Token, Waiters string // the text the cells show
}

func (br *browser) rows(t *testing.T) map[string]pageRow {
	t.Helper()
	rows := eval[[]pageRow](t, br, `[...document.querySelectorAll("#locks tbody tr")].map(tr => ({
		Key: tr.dataset.name,
		Name: tr.querySelector(".name").textContent,
		Holder: tr.querySelector(".holder").textContent,
		Token: tr.querySelector(".token").textContent,
		Waiters: tr.querySelector(".waiters").textContent}))`)
	m := map[string]pageRow{}
	for _, r := range rows {
		m[r.Key] = r
	}
	return m
}

// events are the timeline rows the page shows for name: "kind token".
func (br *browser) events(t *testing.T, name string) []string {
	t.Helper()
	rows := eval[[][]string](t, br, `[...document.querySelectorAll("#timeline tbody tr")].map(tr => [...tr.children].map(td => td.textContent))`)
	var out []string
	for i := len(rows) - 1; i >= 0; i-- { // the page shows the newest first
		if r := rows[i]; len(r) >= 4 && r[1] == name {
			out = append(out, r[2]+" "+r[3])
		}
	}
	return out
}

// waitRow waits until the page's row for name passes ok.
func (br *browser) waitRow(t *testing.T, what, name string, ok func(r pageRow, shown bool) error) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "the page to show "+what, func() error {
		r, shown := br.rows(t)[name]
		return ok(r, shown)
	})
}

// waitEvent waits until the page's timeline for name has the event want
// ("kind token").
func (br *browser) waitEvent(t *testing.T, name, want string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("the timeline of %s to show %q", name, want), func() error {
		got := br.events(t, name)
		for _, e := range got {
			if e == want {
				return nil
			}
		}
		return fmt.Errorf("it shows %q", got)
	})
}

func tokenIn(t *testing.T, path string) uint64 {
	t.Helper()
	tok, err := strconv.ParseUint(waitFile(t, path), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestUIShowsLocksLiveInABrowser drives the dashboard in headless chromium
// against "dlock dev" and real "dlock run" processes: a grant shows within
// a second, then the waiter, the hand-off's new token, a loss by a paused
// holder, a Break from the page, and names with HTML in them as text.
func TestUIShowsLocksLiveInABrowser(t *testing.T) {
	br := startBrowser(t)
	dev := sharedDev(t)
	dir := t.TempDir()
	// The URL with dlock dev's password: the page must never see it.
	password, _ := mustParseURL(t, dev.url).User.Password()
	if password == "" {
		t.Fatalf("dlock dev's URL %q has no password to hide", dev.url)
	}
	ui := startUI(t, dev.env(), "--backend", dev.url, "--allow-break")
	br.do(t, chromedp.Navigate(ui.url), chromedp.WaitVisible(chromedp.ID("locks")))
	eval[bool](t, br, `const p = document.querySelector("#prefix"); p.value = "ui/"; p.dispatchEvent(new Event("input")); true`)

	// A grant shows within a second of the acquisition (its CMD's start).
	orders := "ui/orders/42"
	a := startDlock(t, dev.env(), "run", "--ttl", "2s", "--note", "checkout", orders, "--", "sh", "-c",
		`date +%s%N > "$1/a.acquired"; echo $DLOCK_TOKEN > "$1/a.token"; while [ ! -e "$1/a.go" ]; do sleep 0.02; done`, "sh", dir)
	acquiredNs, err := strconv.ParseInt(waitFile(t, filepath.Join(dir, "a.acquired")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	tokA := tokenIn(t, filepath.Join(dir, "a.token"))
	br.waitRow(t, "the grant", orders, func(r pageRow, shown bool) error {
		if !shown || r.Token != fmt.Sprint(tokA) || !strings.Contains(r.Holder, fmt.Sprintf("pid %d", a.pid())) {
			return fmt.Errorf("row %+v (shown: %v)", r, shown)
		}
		return nil
	})
	latency := time.Since(time.Unix(0, acquiredNs))
	t.Logf("the page showed the grant %v after its CMD started", latency.Round(time.Millisecond))
	if latency > time.Second {
		t.Errorf("the page showed the grant %v after the acquisition; want within 1s", latency)
	}

	// Its waiter.
	b := startDlockJob(t, dev.env(), "run", "--ttl", "2s", orders, "--", "sh", "-c", `echo $DLOCK_TOKEN > "$1/b.token"; sleep 120`, "sh", dir)
	br.waitRow(t, "the waiter", orders, func(r pageRow, shown bool) error {
		if !strings.HasPrefix(r.Waiters, "1") || !strings.Contains(r.Waiters, fmt.Sprintf("pid %d", b.pid())) {
			return fmt.Errorf("row %+v", r)
		}
		return nil
	})

	// A releases: the waiter's grant shows with its new token.
	if err := os.WriteFile(filepath.Join(dir, "a.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tokB := tokenIn(t, filepath.Join(dir, "b.token"))
	br.waitRow(t, "the hand-off's token", orders, func(r pageRow, shown bool) error {
		if r.Token != fmt.Sprint(tokB) || !strings.Contains(r.Holder, fmt.Sprintf("pid %d", b.pid())) {
			return fmt.Errorf("row %+v; want token %d of pid %d", r, tokB, b.pid())
		}
		return nil
	})
	br.waitEvent(t, orders, fmt.Sprintf("release %d", tokA))
	br.waitEvent(t, orders, fmt.Sprintf("grant %d", tokB))

	// B is paused (its whole job) past its TTL: a loss.
	if err := syscall.Kill(-b.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	br.waitEvent(t, orders, fmt.Sprintf("expiry %d", tokB))
	br.waitRow(t, "the lock free after the loss", orders, func(r pageRow, shown bool) error {
		if shown {
			return fmt.Errorf("row %+v", r)
		}
		return nil
	})
	if err := syscall.Kill(-b.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if res := b.wait(t); res.code != exitLeaseLost {
		t.Errorf("the paused holder: %s; want status %d", res, exitLeaseLost)
	}

	// Names and notes with HTML in them are text.
	html := `ui/<b>x</b><img src=x onerror=alert(1)>`
	note := `<i>note</i><script>alert(2)</script>`
	h := startDlock(t, dev.env(), "run", "--note", note, html, "--", "sleep", "120")
	br.waitRow(t, "the lock named with HTML", html, func(r pageRow, shown bool) error {
		if !shown || !strings.Contains(r.Holder, fmt.Sprintf("pid %d", h.pid())) {
			return fmt.Errorf("row %+v (shown: %v)", r, shown)
		}
		return nil
	})
	if r := br.rows(t)[html]; r.Name != html || !strings.Contains(r.Holder, note) {
		t.Errorf("the page shows the name %q and holder %q; want the name %q and note %q as text", r.Name, r.Holder, html, note)
	}
	if elements := eval[int](t, br, `document.querySelectorAll("main b, main img, main i, main script").length`); elements != 0 {
		t.Errorf("the page made %d elements out of a lock's name or note", elements)
	}

	// A semaphore's permits and a read-write lock's readers, each holder
	// listed.
	sem, rw := "ui/render", "ui/catalog"
	p1 := startDlock(t, dev.env(), "run", "--limit", "3", sem, "--", "sleep", "120")
	p2 := startDlock(t, dev.env(), "run", "--limit", "3", sem, "--", "sleep", "120")
	r1 := startDlock(t, dev.env(), "run", "--shared", rw, "--", "sleep", "120")
	r2 := startDlock(t, dev.env(), "run", "--shared", rw, "--", "sleep", "120")
	for _, c := range []struct {
		name, want string
		pids       []int
	}{{sem, "2 of 3 permits", []int{p1.pid(), p2.pid()}}, {rw, "2 readers", []int{r1.pid(), r2.pid()}}} {
		br.waitRow(t, c.want, c.name, func(r pageRow, shown bool) error {
			if !shown || !strings.HasPrefix(r.Holder, c.want) || strings.Count(r.Holder, "(token ") != 2 {
				return fmt.Errorf("row %+v (shown: %v)", r, shown)
			}
			for _, pid := range c.pids {
				if !strings.Contains(r.Holder, fmt.Sprintf("pid %d (token ", pid)) {
					return fmt.Errorf("row %+v: no permit of pid %d", r, pid)
				}
			}
			return nil
		})
	}

	// Break from the page, confirming its dialog.
	backup := "ui/nightly-backup"
	d := startDlock(t, dev.env(), "run", "--note", "backup", backup, "--", "sleep", "120")
	held := waitHeld(t, dev.env(), backup, d.pid())
	br.waitRow(t, "the lock to break", backup, func(r pageRow, shown bool) error {
		if !shown {
			return errors.New("not shown")
		}
		return nil
	})
	// A screenshot with locks, a waiter and the timeline, for the README.
	e := startDlock(t, dev.env(), "run", "--note", "daily", "ui/reports/daily", "--", "sleep", "120")
	waitHeld(t, dev.env(), "ui/reports/daily", e.pid())
	startDlock(t, dev.env(), "run", "--note", "daily", "ui/reports/daily", "--", "sleep", "120")
	br.waitRow(t, "the report's waiter", "ui/reports/daily", func(r pageRow, shown bool) error {
		if !strings.HasPrefix(r.Waiters, "1") {
			return fmt.Errorf("row %+v", r)
		}
		return nil
	})
	if path := os.Getenv("DLOCK_UI_SCREENSHOT"); path != "" {
		png := run(t, br, chromedp.FullScreenshot(100))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	br.click(t, `#locks tr[data-name="`+backup+`"] button.break`)
	if res := d.wait(t); res.code != exitLeaseLost {
		t.Errorf("the holder broken from the page: %s; want status %d", res, exitLeaseLost)
	}
	if now := lockState(t, dev.env(), backup); now.Held && now.Token == held.Token {
		t.Errorf("after Break the grant with token %d still holds %s", held.Token, backup)
	}
	br.waitEvent(t, backup, fmt.Sprintf("break %d", held.Token))
	dialogs := br.seenDialogs()
	if len(dialogs) != 1 || !strings.HasPrefix(dialogs[0], "confirm: Break "+backup) || !strings.Contains(dialogs[0], fmt.Sprintf("token %d", held.Token)) {
		t.Errorf("dialogs: %q; want one confirmation of the break, naming the token (and no alert)", dialogs)
	}

	// A click on a lock shows its own timeline.
	br.click(t, `#locks tr[data-name="ui/reports/daily"] td.name`)
	names := eval[[]string](t, br, `[...document.querySelectorAll("#timeline tbody tr td:nth-child(2)")].map(td => td.textContent)`)
	if len(names) == 0 || slices.ContainsFunc(names, func(n string) bool { return n != "ui/reports/daily" }) {
		t.Errorf("the timeline of the clicked lock ui/reports/daily shows events of %q", names)
	}

	// The filter by prefix.
	eval[bool](t, br, `const q = document.querySelector("#prefix"); q.value = "ui/reports"; q.dispatchEvent(new Event("input")); true`)
	if rows := br.rows(t); len(rows) != 1 || rows["ui/reports/daily"].Name != "ui/reports/daily" {
		t.Errorf("filtered by ui/reports, the page shows %+v", rows)
	}

	// No password anywhere: the page as served, and as it is now.
	dom := eval[string](t, br, "document.documentElement.outerHTML")
	for what, text := range map[string]string{"the page source": ui.source(t), "the page's DOM": dom} {
		if strings.Contains(text, password) {
			t.Errorf("%s holds the backend's password", what)
		}
	}
	if !strings.Contains(dom, "xxxxx@") {
		t.Errorf("the page does not name the backend (with its password redacted):\n%s", dom)
	}
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUIBreaksOnlyWhenAllowedWithThePageKeyAndTheGrantShown checks the
// break endpoint without a browser: a read-only dashboard refuses, a
// request without the page's key is refused, and a token that no longer
// holds the lock breaks nothing.
func TestUIBreaksOnlyWhenAllowedWithThePageKeyAndTheGrantShown(t *testing.T) {
	dev := sharedDev(t)
	holder := startDlock(t, dev.env(), "run", t.Name(), "--", "sleep", "120")
	j := waitHeld(t, dev.env(), t.Name(), holder.pid())

	ro := startUI(t, dev.env())
	src := ro.source(t)
	m := pageKey.FindStringSubmatch(src)
	if m == nil || !strings.Contains(src, `name="dlock-allow-break" content="no"`) {
		t.Fatalf("the read-only page has no key, or does not say it is read-only:\n%s", src)
	}
	if code, body := ro.postBreak(t, m[1], t.Name(), j.Token); code != http.StatusForbidden {
		t.Errorf("break on a read-only dashboard: %d %s; want 403", code, body)
	}

	rw := startUI(t, dev.env(), "--allow-break")
	m = pageKey.FindStringSubmatch(rw.source(t))
	if m == nil {
		t.Fatal("the page has no key")
	}
	if code, body := rw.postBreak(t, "", t.Name(), j.Token); code != http.StatusForbidden {
		t.Errorf("break without the page's key: %d %s; want 403", code, body)
	}
	if code, body := rw.postBreak(t, strings.Repeat("0", len(m[1])), t.Name(), j.Token); code != http.StatusForbidden {
		t.Errorf("break with another key: %d %s; want 403", code, body)
	}
	if code, body := rw.postBreak(t, m[1], t.Name(), j.Token+1); code != http.StatusConflict || !strings.Contains(body, fmt.Sprintf("token %d", j.Token)) {
		t.Errorf("break of a grant that does not hold the lock: %d %s; want 409 naming the holder's token", code, body)
	}
	if now := lockState(t, dev.env(), t.Name()); now.Token != j.Token {
		t.Fatalf("a refused break broke the lock: %+v", now)
	}
	// A page on another host name (DNS rebinding) gets nothing.
	req, _ := http.NewRequest("GET", rw.url, nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("GET with Host attacker.example: %v %v; want 421", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, body := rw.postBreak(t, m[1], t.Name(), j.Token); code != http.StatusOK {
		t.Errorf("break with the key and the holder's token: %d %s; want 200", code, body)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
}

func TestUIRefusesANonLoopbackListenWithoutAllowRemote(t *testing.T) {
	dev := sharedDev(t)
	r := runDlock(t, dev.env(), "ui", "--listen", "0.0.0.0:0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--allow-remote") {
		t.Errorf("dlock ui --listen 0.0.0.0:0: %s; want status %d and advice to pass --allow-remote", r, exitUsage)
	}
}
