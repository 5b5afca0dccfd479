package pglock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/driver"
)

// listener is a driver's one LISTEN connection, shared by all its waiters:
// notifications carry the key of the lock released, and each goes to the
// waiters on that key. Waiting costs no connection per waiter.
//
// It also listens on the driver's own reply channel, where a release
// that hands the lock to one of this driver's queued waiters tells it so
// ("owner token"); each such message goes to that owner's waiter alone.
//
// If the connection breaks, notifications sent meanwhile are lost; the
// listener wakes every waiter when it breaks and again once it listens
// anew, so each looks for itself, and reconnects with back-off.
type listener struct {
	cfg     *pgx.ConnConfig
	timeout time.Duration // bounds connecting and LISTEN

	mu      sync.Mutex
	channel string                                // set once, before the first subscribe
	reply   string                                // this driver's own channel, for hand-offs
	subs    map[string]map[chan struct{}]struct{} // payload → wake channels
	owners  map[string]chan uint64                // owner → its hand-off's token
	key     int64                                 // the advisory lock the connection holds while it lives
	live    bool                                  // connected, holding key
	running bool                                  // the receive loop runs
	ctx     context.Context                       // ends the loop
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop has ended
	closed  bool

	connectMu sync.Mutex // one connect at a time

	heard atomic.Int64 // notifications received, on either channel
}

func newListener(cfg *pgx.ConnConfig, timeout time.Duration) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{cfg: cfg, timeout: timeout, subs: map[string]map[chan struct{}]struct{}{},
		owners: map[string]chan uint64{}, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// setChannel names the table's channel and the driver's reply channel to
// listen on; it is called before the first subscribe.
func (l *listener) setChannel(channel, reply string, key int64) {
	l.mu.Lock()
	l.channel, l.reply, l.key = channel, reply, key
	l.mu.Unlock()
}

// awaitHandOff registers owner for a hand-off message; the token of the
// lease handed over is sent on the returned channel. stop unregisters it.
// Call it after subscribe, which starts the connection.
func (l *listener) awaitHandOff(owner string) (<-chan uint64, func()) {
	ch := make(chan uint64, 1)
	l.mu.Lock()
	l.owners[owner] = ch
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.owners, owner)
		l.mu.Unlock()
	}
}

// liveKey returns the advisory lock that the listening connection holds
// while it lives, or 0 (which no connection holds) while it is not
// connected: a queued waiter's entry names it, so that a release can pass
// over a waiter whose process has gone.
func (l *listener) liveKey() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.live {
		return 0
	}
	return l.key
}

// subscribe registers a wake channel for payload. It returns once the
// connection listens, so that no release after it returns is missed — or
// at once if the listener is reconnecting, in which case the waiter is
// woken when it listens again.
func (l *listener) subscribe(ctx context.Context, payload string) (<-chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, context.Canceled
	}
	if l.subs[payload] == nil {
		l.subs[payload] = map[chan struct{}]struct{}{}
	}
	l.subs[payload][wake] = struct{}{}
	running := l.running
	l.mu.Unlock()
	stop := func() {
		l.mu.Lock()
		delete(l.subs[payload], wake)
		if len(l.subs[payload]) == 0 {
			delete(l.subs, payload)
		}
		l.mu.Unlock()
	}
	if !running {
		if err := l.start(ctx); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return wake, stop, nil
}

// start connects and starts the receive loop, unless another caller has.
func (l *listener) start(ctx context.Context) error {
	l.connectMu.Lock()
	defer l.connectMu.Unlock()
	l.mu.Lock()
	running := l.running
	l.mu.Unlock()
	if running {
		return nil
	}
	conn, err := l.connect(ctx)
	var ended *endedWhileMade
	if err != nil && (!errors.As(err, &ended) || ctx.Err() != nil) {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		if conn != nil {
			conn.Close(context.Background())
		}
		return context.Canceled
	}
	l.running = true
	// A first connection that the server took but ended before it
	// listened (terminated, or its LISTEN timed out) is made again in the
	// background, as a broken one is: the caller waits on, is woken when
	// the connection listens, and meanwhile looks for itself at its
	// heartbeat. A server that refuses connections fails the caller now.
	l.live = conn != nil
	go l.loop(conn)
	return nil
}

// endedWhileMade is a connection that the server took but that failed
// before it listened.
type endedWhileMade struct{ err error }

func (e *endedWhileMade) Error() string { return e.err.Error() }
func (e *endedWhileMade) Unwrap() error { return e.err }

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	l.mu.Lock()
	channel, reply, key := l.channel, l.reply, l.key
	l.mu.Unlock()
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return nil, err
	}
	// The advisory lock says that this connection lives (see liveKey). It
	// waits while a release holds the shared lock of a check made when
	// the previous connection was gone: until that transaction ends.
	if _, err := conn.Exec(ctx, fmt.Sprintf("LISTEN %s; LISTEN %s; SELECT pg_advisory_lock(%d)",
		pgx.Identifier{channel}.Sanitize(), pgx.Identifier{reply}.Sanitize(), key),
		pgx.QueryExecModeSimpleProtocol); err != nil {
		conn.Close(context.Background())
		return nil, &endedWhileMade{err}
	}
	return conn, nil
}

// reconnectBackoff paces the listener's attempts to reconnect.
var reconnectBackoff = driver.Backoff{Base: 50 * time.Millisecond, Cap: 2 * time.Second, Jitter: 0.5}

// loop receives notifications until the listener is closed, reconnecting
// when the connection breaks; it starts by connecting if conn is nil.
func (l *listener) loop(conn *pgx.Conn) {
	defer close(l.done)
	l.mu.Lock()
	reply := l.reply
	l.mu.Unlock()
	for {
		if conn != nil {
			for {
				n, err := conn.WaitForNotification(l.ctx)
				if err != nil {
					break
				}
				l.heard.Add(1)
				if n.Channel == reply {
					l.handOff(n.Payload)
				} else {
					l.wake(n.Payload)
				}
			}
			conn.Close(context.Background())
			l.mu.Lock()
			l.live = false
			l.mu.Unlock()
			if l.ctx.Err() != nil {
				return
			}
			l.wakeAll()
		}
		for try := 0; ; try++ {
			if reconnectBackoff.Wait(l.ctx, try) != nil {
				return
			}
			c, err := l.connect(l.ctx)
			if err == nil {
				conn = c
				break
			}
		}
		l.mu.Lock()
		l.live = true
		l.mu.Unlock()
		l.wakeAll()
	}
}

func (l *listener) wake(payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.subs[payload] {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// handOff passes a hand-off message ("owner token") to that owner's
// waiter, if it still waits.
func (l *listener) handOff(msg string) {
	owner, tok, ok := strings.Cut(msg, " ")
	token, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch := l.owners[owner]; ch != nil {
		select {
		case ch <- token:
		default:
		}
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ws := range l.subs {
		for w := range ws {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

// close ends the loop and its connection.
func (l *listener) close() {
	l.connectMu.Lock() // no start in flight
	l.mu.Lock()
	l.closed = true
	running := l.running
	l.mu.Unlock()
	l.connectMu.Unlock()
	l.cancel()
	if running {
		<-l.done
	}
}
