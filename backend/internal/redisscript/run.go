package redisscript

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// luaScript is a script with a call path that allocates little: the
// lock path runs two scripts per Lock and Unlock, and go-redis's
// Script.Run boxes the command name, the SHA and every key into a fresh
// interface each call. run passes pointers to strings that live on (the
// keys of a cached Keys, the script's own SHA and source), which go-redis
// writes as it writes strings, without a copy.
type luaScript struct {
	*redis.Script        // Run: for pipelines and other Scripters
	src, sha      string // the full source, and its SHA1 for EVALSHA
}

func newLuaScript(src string) *luaScript {
	s := redis.NewScript(src)
	return &luaScript{Script: s, src: src, sha: s.Hash()}
}

// processor is what run needs of a client: *redis.Client and
// *redis.ClusterClient (a pipeline also has Process, but it only queues,
// so a NOSCRIPT reply cannot be seen in time to retry with EVAL).
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run is Script.Run, with keys given as pointers to strings that outlive
// the call.
func (s *luaScript) run(ctx context.Context, rdb redis.Scripter, keys []*string, args ...any) *redis.Cmd {
	var p processor
	switch c := rdb.(type) {
	case *redis.Client:
		p = c
	case *redis.ClusterClient:
		p = c
	default:
		ks := make([]string, len(keys))
		for i, k := range keys {
			ks[i] = *k
		}
		return s.Run(ctx, rdb, ks, slices.Clone(args)...) // a clone: args itself does not escape
	}
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", &s.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	if err := p.Process(ctx, cmd); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server does not have the script (yet, or any more, after a
		// restart or SCRIPT FLUSH): EVAL loads it.
		a[0], a[1] = "eval", &s.src
		cmd = redis.NewCmd(ctx, a...)
		cmd.SetFirstKeyPos(3)
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

// msArg is ms(d) as a script argument. The TTLs a program uses are few
// (a lease TTL, a waiter TTL), so the boxed values of the last ones are
// kept, in a few slots by value, and a call with one of them allocates
// nothing.
func msArg(d time.Duration) any {
	m := ms(d)
	slot := &msArgs[uint64(m)%uint64(len(msArgs))]
	if b := slot.Load(); b != nil && b.ms == m {
		return b.arg
	}
	b := &msBox{ms: m, arg: m}
	slot.Store(b)
	return b.arg
}

type msBox struct {
	ms  int64
	arg any
}

var msArgs [8]atomic.Pointer[msBox]

// arg is w as a script argument, without an allocation.
func (w Wake) arg() any {
	switch w {
	case HandOff:
		return string(HandOff)
	case WakeFirst:
		return string(WakeFirst)
	case WakeAny:
		return string(WakeAny)
	}
	return string(w)
}

// arg is m as a script argument, without an allocation.
func (m TokenMode) arg() any {
	switch m {
	case Incr:
		return string(Incr)
	case Fair:
		return string(Fair)
	}
	return string(m)
}
