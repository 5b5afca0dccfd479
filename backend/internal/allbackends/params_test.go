package allbackends_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/internal/testenv"
)

// TestEveryBackendRejectsUnknownParameterByName opens every backend's URL
// with a parameter no backend takes and with a near miss of one it takes.
// Open fails before connecting, with an error wrapping ErrInvalidOption
// that names the parameter, suggests the near one, and lists the valid
// ones.
func TestEveryBackendRejectsUnknownParameterByName(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	for _, tc := range []struct {
		url        string
		near, want string // a misspelling of want, one of the backend's parameters
	}{
		{"etcd://" + addr, "prefx", "prefix"},
		{"etcds://" + addr, "server-nam", "server_name"},
		{"redis://" + addr + "/0", "waiter_tl", "waiter_ttl"},
		{"rediss://" + addr + "/0", "skipverify", "skip_verify"},
		{"redlock://" + addr + "," + addr + "," + addr + "/0", "allow_evictions", "allow_eviction"},
		{"zk://" + addr + "/locks", "session_timout", "session_timeout"},
		{"postgres://u@" + addr + "/db", "tabel", "table"},
		{"postgresql://u@" + addr + "/db", "sslmod", "sslmode"},
		{"mysql://u@" + addr + "/db", "op_timeot", "op_timeout"},
		{"mariadb://u@" + addr + "/db", "tabl", "table"},
		{"temporal://" + addr + "/default", "task_queu", "task_queue"},
		{"mem://t", "prefix", ""},
	} {
		for _, q := range []string{"colour=blue", tc.near + "=x"} {
			raw := tc.url + "?" + q
			t.Run(raw, func(t *testing.T) {
				t.Parallel()
				err := openFails(t, raw)
				name := strings.SplitN(q, "=", 2)[0]
				if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), fmt.Sprintf("unknown parameter %q", name)) {
					t.Fatalf("err = %v; want ErrInvalidOption naming %q", err, name)
				}
				if tc.want == "" {
					return
				}
				if !strings.Contains(err.Error(), "valid: ") || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v; want it to list the valid parameters, %s among them", err, tc.want)
				}
				if hint := fmt.Sprintf("did you mean %q?", tc.want); name == tc.near && !strings.Contains(err.Error(), hint) {
					t.Errorf("err = %v; want %s", err, hint)
				}
			})
		}
	}
}

// TestDeprecatedParameterStillWorksAndWarns opens backends with the old
// spelling of a parameter: Open takes it (and goes on to connect, which
// fails, nothing listening), and logs a warning that names the old and the
// new spelling on the logger given to Open. For zk, connect-timeout=1ns
// shows that the old spelling sets the value: Open runs out of time at
// once rather than reporting the refused connection.
func TestDeprecatedParameterStillWorksAndWarns(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	for _, tc := range []struct {
		url, old, new string
		says          string // in Open's error
	}{
		{"etcd://" + addr + "?dial-timeout=2s", "dial-timeout", "connect_timeout", "refused"},
		{"etcd://" + addr + "?server-name=etcd.example", "server-name", "server_name", "refused"},
		{"zk://" + addr + "/locks?session-timeout=4s", "session-timeout", "session_timeout", "refused"},
		{"zk://" + addr + "/locks?connect-timeout=1ns", "connect-timeout", "connect_timeout", "deadline exceeded"},
		{"temporal://" + addr + "/default?task-queue=q", "task-queue", "task_queue", "refused"},
		{"temporal://" + addr + "/default?tls-insecure-skip-verify=true", "tls-insecure-skip-verify", "skip_verify", "refused"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			err := openFails(t, tc.url, dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v; want ErrUnavailable saying %q", err, tc.says)
			}
			if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "parameter="+tc.old) || !strings.Contains(s, "use="+tc.new) {
				t.Errorf("log = %q; want a warning naming %s and %s", s, tc.old, tc.new)
			}
		})
	}
}
