package redislock_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// commandStats returns INFO commandstats as command -> calls, without INFO
// itself. The server counts the commands a script runs as well as those
// clients send.
func commandStats(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\r\n") {
		// cmdstat_get:calls=1,usec=2,...
		cmd, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || cmd == "info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[cmd] = n
	}
	return out
}

// maxCommandsPerContendedGrant is what a hand-off of a contended lock may
// cost the server, in commands (a script's own commands included):
//
//	release, handing the lock to the first waiter: EVALSHA, GET (the
//	  lock), LPOP, GET (the waiter's entry), SET, PUBLISH, and an
//	  INCRBY every 64 hand-offs (the token is the next of a block)   6
//	the released worker's next Lock, queueing behind others: EVALSHA,
//	  GET, SET (its entry, NX PX), RPUSH, PEXPIRE (queue); the first
//	  in line also reads the lock's PTTL                            5
//	the new holder's check of the hand-off message: GET              1
//
// The waiters' heartbeats and the holders' renewals are kept out of the
// count by a long waiter TTL and lease TTL.
const maxCommandsPerContendedGrant = 12

// Eight workers, each with its own client as eight processes would have,
// contend for one lock: the commands the server runs per grant stay
// within maxCommandsPerContendedGrant, in both modes.
func TestContendedGrantCommands(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"plain", nil}, {"fair", []dlock.Option{dlock.WithFair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := testenv.StartRedis(t)
			stats := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer stats.Close()
			workers := make([]func(context.Context) (func(), error), 8)
			for i := range workers {
				opts := append([]dlock.Option{dlock.WithTTL(time.Minute)}, mode.opts...)
				c := open(t, "redis://"+srv.Addr+"?waiter_ttl=1m", opts...)
				m := c.Mutex("contended")
				workers[i] = func(ctx context.Context) (func(), error) {
					l, err := m.Lock(ctx)
					if err != nil {
						return nil, err
					}
					return func() { _ = l.Unlock(context.Background()) }, nil
				}
			}
			// Warm up: connections, subscriptions, loaded scripts.
			if r := testenv.Contend(workers, 40, time.Millisecond, time.Minute); r.Errors > 0 {
				t.Fatalf("warm-up: %d lock calls failed", r.Errors)
			}
			before := commandStats(t, stats)
			const grants = 400
			r := testenv.Contend(workers, grants, time.Millisecond, 3*time.Minute)
			after := commandStats(t, stats)
			if r.Errors > 0 || r.Grants < grants {
				t.Fatalf("%d grants, %d lock calls failed", r.Grants, r.Errors)
			}
			var total int64
			var breakdown []string
			for _, cmd := range slices.Sorted(maps.Keys(after)) {
				if n := after[cmd] - before[cmd]; n > 0 {
					total += n
					breakdown = append(breakdown, cmd+"="+strconv.FormatFloat(float64(n)/grants, 'f', 2, 64))
				}
			}
			perGrant := float64(total) / grants
			t.Logf("%.2f commands per grant: %s", perGrant, strings.Join(breakdown, " "))
			// The last round's leftover waiters leave the queue when Contend
			// cancels them: allow for them (8 scripts of up to 20 commands).
			if limit := maxCommandsPerContendedGrant + 160.0/grants; perGrant > limit {
				t.Errorf("%.2f commands per grant, want at most %.2f", perGrant, limit)
			}
		})
	}
}
