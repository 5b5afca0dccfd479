package pglock

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/driver"
)

// listener is a driver's one LISTEN connection, shared by all its waiters:
// notifications carry the key of the lock released, and each goes to the
// waiters on that key. Waiting costs no connection per waiter.
//
// If the connection breaks, notifications sent meanwhile are lost; the
// listener wakes every waiter when it breaks and again once it listens
// anew, so each looks for itself, and reconnects with back-off.
type listener struct {
	cfg     *pgx.ConnConfig
	timeout time.Duration // bounds connecting and LISTEN

	mu      sync.Mutex
	channel string                                // set once, before the first subscribe
	subs    map[string]map[chan struct{}]struct{} // payload → wake channels
	running bool                                  // the receive loop runs
	ctx     context.Context                       // ends the loop
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop has ended
	closed  bool

	connectMu sync.Mutex // one connect at a time
}

func newListener(cfg *pgx.ConnConfig, timeout time.Duration) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{cfg: cfg, timeout: timeout, subs: map[string]map[chan struct{}]struct{}{},
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// setChannel names the channel to listen on; it is called before the
// first subscribe.
func (l *listener) setChannel(channel string) {
	l.mu.Lock()
	l.channel = channel
	l.mu.Unlock()
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
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close(context.Background())
		return context.Canceled
	}
	l.running = true
	go l.loop(conn)
	return nil
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	l.mu.Lock()
	channel := l.channel
	l.mu.Unlock()
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// reconnectBackoff paces the listener's attempts to reconnect.
var reconnectBackoff = driver.Backoff{Base: 50 * time.Millisecond, Cap: 2 * time.Second, Jitter: 0.5}

// loop receives notifications until the listener is closed, reconnecting
// when the connection breaks.
func (l *listener) loop(conn *pgx.Conn) {
	defer close(l.done)
	for {
		for {
			n, err := conn.WaitForNotification(l.ctx)
			if err != nil {
				break
			}
			l.wake(n.Payload)
		}
		conn.Close(context.Background())
		if l.ctx.Err() != nil {
			return
		}
		l.wakeAll()
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
