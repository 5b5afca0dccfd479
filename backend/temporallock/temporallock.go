package temporallock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("temporal", func(ctx context.Context, u *url.URL) (driver.Driver, error) { return Open(ctx, u) })
}

// Mode selects how locks are kept.
type Mode string

const (
	// ModeFair keeps one mutex workflow per name with a FIFO queue (the default).
	ModeFair Mode = "fair"
	// ModeID makes a lock one workflow run whose ID is derived from the
	// name: held while it runs.
	ModeID Mode = "id"
)

// DefaultTaskQueue is the task queue of dlock's workflows.
const DefaultTaskQueue = "dlock"

// workflowTaskTimeout bounds how long a lock workflow's task may sit with a
// worker that vanished (killed, or cut off after it polled) before another
// worker gets it: the server's default of 10s would hold up hand-overs and
// renewals for longer than a typical lease. The lock workflows' tasks take
// milliseconds.
const workflowTaskTimeout = 3 * time.Second

// Option configures New.
type Option func(*config) error

// set makes an Option of a setting that cannot fail (New checks the
// result).
func set(f func(*config)) Option {
	return func(c *config) error {
		f(c)
		return nil
	}
}

type config struct {
	mode         Mode
	taskQueue    string
	noWorker     bool
	historyLimit int
}

// WithMode selects fair (default) or id mode.
func WithMode(m Mode) Option { return set(func(c *config) { c.mode = m }) }

// WithTaskQueue sets the task queue of the lock workflows (default "dlock").
// Every client and worker of a deployment must use the same one.
func WithTaskQueue(q string) Option { return set(func(c *config) { c.taskQueue = q }) }

// WithoutWorker stops the driver from running a worker for the lock
// workflows: the caller runs one itself, with RegisterWorkflows, on the
// same task queue.
func WithoutWorker() Option { return set(func(c *config) { c.noWorker = true }) }

// withHistoryLimit makes the lock workflows continue as new after n
// history events (tests).
func withHistoryLimit(n int) Option { return set(func(c *config) { c.historyLimit = n }) }

// Driver is the Temporal backend. It implements driver.Driver.
type Driver struct {
	c       client.Client
	own     bool // Close closes c
	w       worker.Worker
	cfg     config
	stopSub chan struct{}
	// contended: the names whose queue the mutex workflow's replies to
	// this driver lately counted crowded (see queueBySignal).
	contended contention
}

var _ driver.Driver = (*Driver)(nil)

// New returns a driver over a Temporal client the caller made (and still
// owns: Close does not close it). Its errors wrap dlock.ErrInvalidOption,
// or dlock.ErrUnavailable when the worker cannot start. Unless WithoutWorker is given, it starts a
// worker for the lock workflows on the driver's task queue.
func New(c client.Client, opts ...Option) (*Driver, error) {
	cfg := config{mode: ModeFair, taskQueue: DefaultTaskQueue}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	switch cfg.mode {
	case ModeFair, ModeID:
	default:
		return nil, fmt.Errorf("%w: temporal mode %q: want fair or id", dlock.ErrInvalidOption, cfg.mode)
	}
	if cfg.taskQueue == "" {
		return nil, fmt.Errorf("%w: temporal task queue is empty", dlock.ErrInvalidOption)
	}
	d := &Driver{c: c, cfg: cfg, stopSub: make(chan struct{})}
	if !cfg.noWorker {
		d.w = worker.New(c, cfg.taskQueue, worker.Options{
			LocalActivityWorkerOnly: true, // no activities: no activity pollers
			// When a worker dies, its workflows' next tasks (a lease's end
			// among them) wait this long before another worker gets them.
			StickyScheduleToStartTimeout: time.Second,
		})
		RegisterWorkflows(d.w)
		if err := d.w.Start(); err != nil {
			return nil, fmt.Errorf("%w: start temporal worker: %w", driver.ErrUnavailable, err)
		}
	}
	return d, nil
}

// WorkflowRegistry is where RegisterWorkflows registers: a worker.Worker
// or a worker.WorkflowReplayer.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// RegisterWorkflows registers dlock's lock workflows on w, for a service
// that runs its own worker (see WithoutWorker). The worker must poll the
// task queue the clients use (default "dlock"), and all workers of that
// queue must run the same version of this package.
//
// It also accepts a worker.WorkflowReplayer, to replay recorded histories.
func RegisterWorkflows(w WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(MutexWorkflow, workflowOptions(mutexWorkflowName))
	w.RegisterWorkflowWithOptions(IDLockWorkflow, workflowOptions(idLockWorkflowName))
}

// Open connects to the Temporal frontend named by u:
//
//	temporal://[:API_KEY@]host:7233/namespace?mode=fair|id&task_queue=dlock&tls=true&...
//
// See the package doc for every parameter.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	opts, dopts, err := parseURL(ctx, u)
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: temporal %s: %w", driver.ErrUnavailable, opts.HostPort, err)
	}
	d, err := New(c, dopts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	d.own = true
	return d, nil
}

func parseURL(ctx context.Context, u *url.URL) (client.Options, []Option, error) {
	bad := func(format string, a ...any) (client.Options, []Option, error) {
		return client.Options{}, nil, fmt.Errorf("%w: temporal URL: "+format, append([]any{dlock.ErrInvalidOption}, a...)...)
	}
	opts := client.Options{HostPort: u.Host, Namespace: strings.Trim(u.Path, "/"), Logger: sdkLogger(driver.Logger(ctx))}
	if opts.HostPort == "" {
		opts.HostPort = "127.0.0.1:7233"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if strings.Contains(opts.Namespace, "/") {
		return bad("namespace %q contains '/'", opts.Namespace)
	}
	apiKey := ""
	if u.User != nil {
		apiKey, _ = u.User.Password()
	}
	var dopts []Option
	var useTLS, worker = false, true
	var tf driver.TLSFiles
	params := driver.Params{Backend: "temporal", List: append([]driver.Param{
		{Name: "mode", Usage: "fair or id", Set: func(v string) error {
			dopts = append(dopts, WithMode(Mode(v)))
			return nil
		}},
		{Name: "task_queue", Usage: "task queue of the lock workflows", Deprecated: []string{"task-queue"}, Set: func(v string) error {
			dopts = append(dopts, WithTaskQueue(v))
			return nil
		}},
		{Name: "worker", Usage: "run a worker in this client", Set: driver.BoolParam(&worker)},
		{Name: "api_key_env", Usage: "read the API key from this environment variable", Deprecated: []string{"api-key-env"}, Set: func(v string) error {
			if apiKey = os.Getenv(v); apiKey == "" {
				return fmt.Errorf("the variable %s is empty", v)
			}
			return nil
		}},
		{Name: "tls", Usage: "use TLS", Set: driver.BoolParam(&useTLS)},
	}, driver.TLSParams(&tf)...)}
	for i, old := range []string{"tls-ca", "tls-cert", "tls-key", "tls-server-name", "tls-insecure-skip-verify"} {
		params.List[5+i].Deprecated = []string{old} // ca, cert, key, server_name, skip_verify
	}
	q := u.Query()
	if _, err := params.Parse(ctx, q); err != nil {
		return client.Options{}, nil, err
	}
	if !worker {
		dopts = append(dopts, WithoutWorker())
	}
	if apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
		useTLS = useTLS || !q.Has("tls") // Temporal Cloud API keys need TLS
	}
	if useTLS || tf.Set() {
		tlsConf, err := tf.Config(nil)
		if err != nil {
			return bad("%v", err)
		}
		opts.ConnectionOptions.TLS = tlsConf
	}
	return opts, dopts, nil
}

// sdkLogger passes the SDK's log lines (a worker started, a poll failed
// while the server restarts) to l at debug level, their own level as an
// attribute: the errors that matter reach the caller as errors.
func sdkLogger(l *slog.Logger) tlog.Logger { return debugLogger{l} }

type debugLogger struct{ l *slog.Logger }

func (d debugLogger) log(level, msg string, keyvals []any) {
	d.l.Debug("temporal: "+msg, append([]any{"sdk_level", level}, keyvals...)...)
}

func (d debugLogger) Debug(msg string, keyvals ...any) { d.log("debug", msg, keyvals) }
func (d debugLogger) Info(msg string, keyvals ...any)  { d.log("info", msg, keyvals) }
func (d debugLogger) Warn(msg string, keyvals ...any)  { d.log("warn", msg, keyvals) }
func (d debugLogger) Error(msg string, keyvals ...any) { d.log("error", msg, keyvals) }

// Client returns the Temporal client the driver uses.
func (d *Driver) Client() client.Client { return d.c }

// Mode returns the driver's mode.
func (d *Driver) Mode() Mode { return d.cfg.mode }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fair:           d.cfg.mode == ModeFair,
		DurableFencing: true,
		LockDelay:      d.cfg.mode == ModeFair,
		// The mutex workflow's queue grants several holders by the rule
		// of driver.QueueHolders; id mode has one run per name.
		Semaphore: d.cfg.mode == ModeFair,
		RWMutex:   d.cfg.mode == ModeFair,
		MinTTL:    time.Second,
	}
}

// Close stops the driver's worker and, if Open made the client, closes it.
// Held leases are not released: they expire after their TTL.
func (d *Driver) Close() error {
	select {
	case <-d.stopSub:
	default:
		close(d.stopSub)
	}
	if d.w != nil {
		d.w.Stop()
	}
	if d.own {
		d.c.Close()
	}
	return nil
}

// WorkflowID returns the workflow ID of name's lock in the given mode:
//
//	dlock/<escaped name>      fair mode    dlock-id/<escaped name>   id mode
//
// where the name is escaped byte by byte as in URLs (every byte outside
// A-Z a-z 0-9 - . _ ~ / becomes %XX), which is one-to-one. A name whose
// escaped form is longer than 200 bytes is hashed instead:
// dlock#<driver.NameHash(name)> (dlock-id#… in id mode); '#' never
// appears in an escaped name, so the two forms cannot collide. The two
// modes use different IDs: a fair-mode lock and an id-mode lock of the same
// name do not exclude each other.
func WorkflowID(mode Mode, name string) string {
	prefix := "dlock"
	if mode == ModeID {
		prefix = "dlock-id"
	}
	if esc := escapeName(name); len(esc) <= 200 {
		return prefix + "/" + esc
	}
	return prefix + "#" + driver.NameHash(name)
}

func escapeName(name string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

func workflowOptions(name string) workflow.RegisterOptions {
	return workflow.RegisterOptions{Name: name}
}

func (d *Driver) workflowID(name string) string { return WorkflowID(d.cfg.mode, name) }

// unavailable classifies a Temporal error for the caller whose context is
// ctx (driver.Classify).
func unavailable(ctx context.Context, what string, err error) error {
	return driver.Classify(ctx, "temporal "+what, err)
}

// asUnavailable classifies a Temporal error for calls whose context is one
// of ours (a per-attempt or per-call bound), not the caller's: its
// deadline means the server did not answer, so it is ErrUnavailable.
func asUnavailable(what string, err error) error {
	return driver.Classify(context.Background(), "temporal "+what, err)
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if d.cfg.mode == ModeID {
		return driver.AcquireByRetry(ctx, req, (*idLocker)(d))
	}
	return d.fairAcquire(ctx, req)
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	r := extendReq{Owner: h.Owner, Token: h.Token, TTL: ttl}
	rep, err := d.update(ctx, h.Name, chainOf(h), updExtend, r)
	if err != nil {
		return err
	}
	if rep.Status != stOK {
		return fmt.Errorf("%w: %q (token %d) is no longer held by this owner", driver.ErrLeaseLost, h.Name, h.Token)
	}
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	if d.cfg.mode == ModeID {
		return (*idLocker)(d).Release(ctx, h)
	}
	rep, err := d.update(ctx, h.Name, chainOf(h), updRelease, ownerReq{Owner: h.Owner})
	if err != nil {
		return err
	}
	if rep.Status != stOK {
		return fmt.Errorf("%w: %q (token %d) is no longer held by this owner", driver.ErrLeaseLost, h.Name, h.Token)
	}
	return nil
}

// chainOf is the run chain a grant belongs to: in id mode the first run
// of the lease's own workflow execution chain (which continues as new to
// bound its history), so that a request never reaches a later holder's
// run; in fair mode any run of the mutex workflow.
func chainOf(h driver.Held) string {
	if run, ok := h.Handle.(string); ok {
		return run
	}
	return ""
}

// update sends a non-blocking update to name's lock workflow (in the run
// chain that starts with firstRun, if not empty) and waits for its reply.
// A workflow or chain that does not run is reported as status lost: there
// is no lease there.
func (d *Driver) update(ctx context.Context, name, firstRun, update string, args ...any) (reply, error) {
	h, err := d.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:          d.workflowID(name),
		FirstExecutionRunID: firstRun,
		UpdateName:          update,
		Args:                args,
		WaitForStage:        client.WorkflowUpdateStageCompleted,
	})
	var rep reply
	if err == nil {
		err = h.Get(ctx, &rep)
	}
	if err != nil {
		if isNotFound(err) {
			return reply{Status: stLost}, nil
		}
		return reply{}, unavailable(ctx, update+" "+strconv.Quote(name), err)
	}
	return rep, nil
}

// Break implements driver.Driver.
func (d *Driver) Break(ctx context.Context, name string) error {
	if d.cfg.mode == ModeID {
		return (*idLocker)(d).breakLock(ctx, name)
	}
	rep, err := d.update(ctx, name, "", updBreak)
	if err != nil {
		return err
	}
	if rep.Status != stOK {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, name)
	}
	return nil
}

// describe returns the server's description of a workflow run (the latest
// run when runID is empty).
func (d *Driver) describe(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	desc, err := d.c.DescribeWorkflow(ctx, id, runID)
	if err != nil {
		return nil, err
	}
	return desc.RawResponse, nil
}
