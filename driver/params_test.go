package driver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

func testParams(timeout *time.Duration, on *bool) driver.Params {
	return driver.Params{Backend: "test", List: []driver.Param{
		{Name: "op_timeout", Usage: "a bound", Set: driver.DurationParam(timeout), Deprecated: []string{"op-timeout"}},
		{Name: "tls", Usage: "use TLS", Set: driver.BoolParam(on)},
		{Name: "addr", Usage: "the client's own"},
	}}
}

func TestParseRejectsUnknownParameterByNameAndSuggests(t *testing.T) {
	var d time.Duration
	var on bool
	_, err := testParams(&d, &on).Parse(context.Background(), url.Values{"op_timout": {"1s"}})
	if !errors.Is(err, driver.ErrInvalidOption) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
	for _, want := range []string{`"op_timout"`, `did you mean "op_timeout"?`, "valid: op_timeout, tls; the client library's: addr"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want it to say %s", err, want)
		}
	}
	_, err = testParams(&d, &on).Parse(context.Background(), url.Values{"colour": {"blue"}})
	if err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), `"colour"`) {
		t.Errorf("err = %v; want the name and no suggestion for a far miss", err)
	}
}

func TestParseReadsDeprecatedSpellingAndWarns(t *testing.T) {
	var logs bytes.Buffer
	ctx := driver.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
	var d time.Duration
	var on bool
	rest, err := testParams(&d, &on).Parse(ctx, url.Values{"op-timeout": {"3s"}, "tls": {"1"}, "addr": {"a:1", "b:2"}})
	if err != nil {
		t.Fatal(err)
	}
	if d != 3*time.Second || !on {
		t.Errorf("op_timeout %v, tls %v; want 3s, true", d, on)
	}
	if got := rest["addr"]; len(rest) != 1 || len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("rest = %v, want both addr values and nothing else", rest)
	}
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "parameter=op-timeout") || !strings.Contains(s, "use=op_timeout") {
		t.Errorf("log = %q; want a warning naming op-timeout and op_timeout", s)
	}
}

func TestParseRefusesBadValueAndTwoSpellings(t *testing.T) {
	var d time.Duration
	var on bool
	for q, want := range map[string]string{
		"op_timeout=soon":             `op_timeout="soon": want a positive duration`,
		"tls=maybe":                   `tls="maybe": want true or false`,
		"op_timeout=1s&op-timeout=2s": "same parameter",
	} {
		v, _ := url.ParseQuery(q)
		_, err := testParams(&d, &on).Parse(context.Background(), v)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v; want ErrInvalidOption saying %s", q, err, want)
		}
	}
}

func TestChoiceParamRefusesOtherValuesNamingTheValidOnes(t *testing.T) {
	var mode string
	ps := driver.Params{Backend: "test", List: []driver.Param{{Name: "compat", Usage: "a layout", Set: driver.ChoiceParam(&mode, "kazoo", "curator")}}}
	if _, err := ps.Parse(context.Background(), url.Values{"compat": {"curator"}}); err != nil || mode != "curator" {
		t.Fatalf("compat=curator: mode %q, err %v; want curator, nil", mode, err)
	}
	_, err := ps.Parse(context.Background(), url.Values{"compat": {"redsync"}})
	if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), `compat="redsync": want one of kazoo, curator`) {
		t.Errorf("err = %v; want ErrInvalidOption naming the value and kazoo, curator", err)
	}
}
