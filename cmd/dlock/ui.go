package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dlock/dlock"
)

const uiUsage = `Usage:
  dlock ui [flags]

Serves a dashboard of the backend's locks to a web browser: a live table
(name, holder's host, process ID and note, token, held for, expires in,
waiters), a timeline of each lock's grants, releases, losses and breaks
with their tokens, and a filter by name prefix. The page's files are built
into dlock: it loads nothing from elsewhere.

The dashboard polls the backend (dlock list) every 200 ms and pushes each
change to the page at once, as server-sent events. The timeline is inferred
from consecutive polls, since no backend keeps a history: a new token is a
grant; a token that is gone ended by expiry (a loss) if the expiry the
backend reported at the previous poll had passed, else by a release (or a
break by another client: the backend does not tell them apart); a break
from this dashboard is shown as one. Its times are exact to the poll
interval, and a grant shorter than that may not be seen.

It is read-only unless --allow-break: then each held lock has a Break
button that asks for confirmation and breaks the lock only if the grant
the page showed (its token) still holds it, as "dlock break --token" does.
Only the page dlock ui served can break: the request carries a random key
made at start and embedded in that page.

It serves on the loopback interface only, unless --allow-remote lets
--listen name another address; then anyone who can reach it sees the lock
names and holders (and, with --allow-break, can break locks): put it behind
something that authenticates. The backend's URL is shown to the page with
its password removed. Ctrl-C stops it.

Flags:
{{flags}}` + backendHelp + metricsHelp + `
Example:
  dlock ui                              # then open http://127.0.0.1:8765/
  dlock ui --listen 127.0.0.1:0 --allow-break
`

// uiPollInterval is how often the dashboard polls the backend.
const uiPollInterval = 200 * time.Millisecond

// uiMaxEvents is how many timeline events the dashboard keeps.
const uiMaxEvents = 2000

//go:embed ui
var uiFiles embed.FS

func uiCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock ui", uiUsage, env.stdout)
	bf.register(fs)
	listen := fs.String("listen", "127.0.0.1:8765", "serve the dashboard on `host:port` (port 0: a free port); a loopback address unless --allow-remote")
	allowBreak := fs.Bool("allow-break", false, "show a Break button on each held lock")
	allowRemote := fs.Bool("allow-remote", false, "let --listen and --metrics-addr name an address other machines can reach")
	var mf metricsFlags
	mf.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q: dlock ui takes only flags", fs.Arg(0))
	}
	_, _, loopback, err := checkListen("--listen", *listen, *allowRemote, "the dashboard")
	if err != nil {
		return err
	}
	mf.allowRemote = *allowRemote
	if mf.addr != "" {
		if _, _, err := mf.check(); err != nil {
			return err
		}
	}
	b, err := bf.shared(env)
	if err != nil {
		return err
	}
	ms, err := mf.start(env, b.url)
	if err != nil {
		return err
	}
	defer ms.Close()
	c, err := bf.open(ctx, b, ms.option())
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return usageErrorf("--listen %s: %v", *listen, err)
	}
	u, err := newUIServer(&bf, b, c, *allowBreak, !loopback)
	if err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go u.poll(ctx)
	srv := &http.Server{
		Handler:           u.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx }, // ends the event streams at Ctrl-C
	}
	mode := "read-only"
	if *allowBreak {
		mode = "Break buttons enabled"
	}
	if !loopback {
		fmt.Fprintf(env.stderr, "dlock ui: WARNING: serving on %s, which other machines can reach; whoever reaches it sees every lock\n", l.Addr())
	}
	fmt.Fprintf(env.stdout, "dlock ui: serving http://%s/ (%s), showing %s\n", l.Addr(), mode, b)
	fmt.Fprintf(env.stdout, "Ctrl-C stops it.\n")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	return srv.Shutdown(sctx)
}

// uiServer serves the dashboard: the page, its event stream, and the break
// endpoint.
type uiServer struct {
	bf         *backendFlags
	b          *backend
	c          *dlock.Client
	allowBreak bool
	remote     bool   // serving beyond loopback: any Host header goes
	key        string // the random key the break endpoint wants: only our page has it
	page       []byte

	mu     sync.Mutex
	locks  []byte // the last "locks" message
	events []timelineEvent
	broken map[string]uint64 // name → token this dashboard broke
	subs   map[chan uiMessage]struct{}
}

// uiMessage is one server-sent event.
type uiMessage struct {
	event string
	data  []byte
}

// uiLocks is the data of a "locks" message: the locks as "dlock list
// --json" shows them, the server's time of the poll (the page counts from
// it), and the poll's error, if it failed.
type uiLocks struct {
	At    int64      `json:"at"`
	Locks []lockJSON `json:"locks"`
	Error string     `json:"error,omitempty"`
}

func newUIServer(bf *backendFlags, b *backend, c *dlock.Client, allowBreak, remote bool) (*uiServer, error) {
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	u := &uiServer{bf: bf, b: b, c: c, allowBreak: allowBreak, remote: remote, key: hex.EncodeToString(key),
		broken: map[string]uint64{}, subs: map[chan uiMessage]struct{}{}}
	t, err := template.ParseFS(uiFiles, "ui/index.html")
	if err != nil {
		return nil, err
	}
	var page bytes.Buffer
	err = t.Execute(&page, struct {
		Key        string
		Backend    string
		AllowBreak bool
	}{u.key, b.String(), allowBreak}) // b.String() has the password redacted
	if err != nil {
		return nil, err
	}
	u.page = page.Bytes()
	u.locks, _ = json.Marshal(uiLocks{At: time.Now().UnixMilli(), Locks: []lockJSON{}})
	return u, nil
}

// poll lists the locks every uiPollInterval until ctx ends, and publishes
// what changed.
func (u *uiServer) poll(ctx context.Context) {
	var prev *pollSnapshot
	tick := time.NewTicker(uiPollInterval)
	defer tick.Stop()
	failing := ""
	for {
		at := time.Now()
		lctx, cancel := context.WithTimeout(ctx, u.bf.timeout)
		infos, err := u.c.List(lctx, "")
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			msg := oneLine(u.b.failed(err)) // names the backend with its password redacted
			if msg != failing {
				failing = msg
				data, _ := json.Marshal(uiLocks{At: at.UnixMilli(), Locks: []lockJSON{}, Error: msg})
				u.publish(data, nil)
			}
		default:
			cur := newSnapshot(prev, at, infos)
			if changed(prev, cur) || failing != "" {
				failing = ""
				out := uiLocks{At: at.UnixMilli(), Locks: make([]lockJSON, 0, len(infos))}
				for _, in := range infos {
					out.Locks = append(out.Locks, toJSON(in))
				}
				data, _ := json.Marshal(out)
				u.mu.Lock()
				events := timeline(prev, cur, u.broken)
				for _, e := range events {
					if e.Kind == "break" {
						delete(u.broken, e.Name)
					}
				}
				u.mu.Unlock()
				u.publish(data, events)
			}
			prev = &cur
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// publish records the locks message and the new events and sends them to
// every page. A page that does not keep up is dropped; its browser
// reconnects and gets the whole state.
func (u *uiServer) publish(locks []byte, events []timelineEvent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.locks = locks
	u.events = append(u.events, events...)
	if len(u.events) > uiMaxEvents {
		u.events = slices.Clone(u.events[len(u.events)-uiMaxEvents:])
	}
	msgs := []uiMessage{{"locks", locks}}
	if len(events) > 0 {
		data, _ := json.Marshal(events)
		msgs = append(msgs, uiMessage{"timeline", data})
	}
	for ch := range u.subs {
		for _, m := range msgs {
			select {
			case ch <- m:
				continue
			default:
			}
			delete(u.subs, ch)
			close(ch)
			break
		}
	}
}

func (u *uiServer) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFiles, "ui")
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(u.page)
	})
	mux.Handle("GET /app.js", http.FileServerFS(static))
	mux.Handle("GET /app.css", http.FileServerFS(static))
	mux.HandleFunc("GET /events", u.serveEvents)
	mux.HandleFunc("POST /break", u.serveBreak)
	return u.guard(mux)
}

// guard sets the headers that keep the page from loading anything from
// elsewhere or being framed, and, on loopback, refuses requests whose Host
// is not a loopback name: a web site that makes its own name resolve to
// 127.0.0.1 (DNS rebinding) cannot read the page or its key.
func (u *uiServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !u.remote {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopback(host) {
				http.Error(w, "dlock ui serves loopback names only (Host "+host+")", http.StatusMisdirectedRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// serveEvents streams the state to one page: a "state" event with the
// locks and the timeline so far, then "locks" and "timeline" events as they
// change.
func (u *uiServer) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan uiMessage, 64)
	u.mu.Lock()
	events, _ := json.Marshal(append([]timelineEvent{}, u.events...))
	state := fmt.Appendf(nil, `{"locks":%s,"timeline":%s}`, u.locks, events)
	u.subs[ch] = struct{}{}
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		if _, ok := u.subs[ch]; ok {
			delete(u.subs, ch)
			close(ch)
		}
		u.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	writeEvent(w, uiMessage{"state", state})
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case m, ok := <-ch:
			if !ok {
				return
			}
			writeEvent(w, m)
		}
		fl.Flush()
	}
}

// writeEvent writes m in the event-stream format; its data is JSON, which
// has no raw newline.
func writeEvent(w http.ResponseWriter, m uiMessage) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, m.data)
}

// uiBreakRequest is what the Break button sends: the lock and the token
// the page showed.
type uiBreakRequest struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
}

// serveBreak breaks a lock for the page: only with --allow-break, only with
// the key of the page this run served, and only the grant the page showed.
func (u *uiServer) serveBreak(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	fail := func(status int, format string, args ...any) {
		reply(status, map[string]string{"error": fmt.Sprintf(format, args...)})
	}
	if !u.allowBreak {
		fail(http.StatusForbidden, "this dashboard is read-only: start dlock ui with --allow-break to break locks from it")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Dlock-Key")), []byte(u.key)) != 1 {
		fail(http.StatusForbidden, "the request does not carry the key of the page this dlock ui served: reload the page")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		fail(http.StatusUnsupportedMediaType, "want a JSON body")
		return
	}
	var req uiBreakRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<14)).Decode(&req); err != nil {
		fail(http.StatusBadRequest, "the body: %v", err)
		return
	}
	if req.Token == 0 {
		fail(http.StatusBadRequest, "token: want the token of the grant to break")
		return
	}
	if err := dlock.ValidateName(req.Name); err != nil {
		fail(http.StatusBadRequest, "name: %v", err)
		return
	}
	// Noted before the break, so that the poll that sees the grant gone
	// knows why.
	u.mu.Lock()
	u.broken[req.Name] = req.Token
	u.mu.Unlock()
	info, err := u.bf.breakGrant(r.Context(), u.c, u.b, req.Name, req.Token)
	if err != nil {
		u.mu.Lock()
		delete(u.broken, req.Name)
		u.mu.Unlock()
	}
	switch {
	case errors.Is(err, errNothingBroken):
		fail(http.StatusConflict, "%s", oneLine(err))
		return
	case err != nil:
		fail(http.StatusBadGateway, "%s", oneLine(err))
		return
	}
	reply(http.StatusOK, map[string]string{"broke": fmt.Sprintf("broke %s: it was held by %s", shown(req.Name), describeHolder(info))})
}
