package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidOption: an option, argument or URL parameter out of range; the
// message names it and the rule. Package dlock re-exports it.
var ErrInvalidOption = errors.New("dlock: invalid option")

// Param is one query parameter of a backend's URLs.
type Param struct {
	// Name is the spelling to write. dlock's own parameters are lower case
	// with underscores (op_timeout, skip_verify), as the engines' client
	// libraries spell theirs.
	Name string
	// Usage says in one line what the parameter means.
	Usage string
	// Set parses the value. Its error needs to say only what was expected:
	// Parse names the backend, the parameter and the value. A nil Set
	// leaves the parameter, under Name, in the values Parse returns, for
	// the engine's client library.
	Set func(value string) error
	// Deprecated lists old spellings that still work for one release:
	// Parse reads them as Name and logs a warning that names the new
	// spelling.
	Deprecated []string
}

// Params are the query parameters a backend accepts: one vocabulary for
// every backend, parsed and checked in one place. See the README's table
// of URL parameters.
type Params struct {
	Backend string  // named in errors: "etcd", "redis", …
	List    []Param // the backend's own parameters, and the engine client's it lets through
}

// Parse applies the parameters of q. An unknown parameter is an error
// wrapping ErrInvalidOption that names it, suggests the closest valid one
// and lists them all; so is a parameter given under two spellings, and a
// value Set refuses. When a parameter is given more than once, the last
// value counts, except for a parameter without Set, whose every value is
// passed on. A deprecated spelling logs a warning on Logger(ctx).
//
// The values returned are those of the parameters without Set, under their
// current names, for the engine's client library.
func (ps Params) Parse(ctx context.Context, q url.Values) (url.Values, error) {
	rest := url.Values{}
	seen := map[string]string{} // Name → the spelling used
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors and warnings in a stable order
	for _, k := range keys {
		p, ok := ps.lookup(k)
		if !ok {
			return nil, ps.unknown(k)
		}
		if other, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("%w: %s URL: %s and %s are the same parameter; give one", ErrInvalidOption, ps.Backend, other, k)
		}
		seen[p.Name] = k
		if k != p.Name {
			Logger(ctx).WarnContext(ctx, "dlock: deprecated URL parameter; it will stop working in the next release",
				"backend", ps.Backend, "parameter", k, "use", p.Name)
		}
		vs := q[k]
		if p.Set == nil {
			rest[p.Name] = append(rest[p.Name], vs...)
			continue
		}
		v := vs[len(vs)-1]
		if err := p.Set(v); err != nil {
			if errors.Is(err, ErrInvalidOption) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s URL: %s=%q: %v", ErrInvalidOption, ps.Backend, k, v, err)
		}
	}
	return rest, nil
}

// Names lists the current spellings, in the order of List.
func (ps Params) Names() []string {
	names := make([]string, len(ps.List))
	for i, p := range ps.List {
		names[i] = p.Name
	}
	return names
}

func (ps Params) lookup(k string) (Param, bool) {
	for _, p := range ps.List {
		if p.Name == k || slices.Contains(p.Deprecated, k) {
			return p, true
		}
	}
	return Param{}, false
}

func (ps Params) unknown(k string) error {
	var spellings []string
	for _, p := range ps.List {
		spellings = append(spellings, p.Name)
		spellings = append(spellings, p.Deprecated...)
	}
	hint := ""
	if near := Closest(strings.ToLower(k), spellings); near != "" {
		p, _ := ps.lookup(near)
		hint = fmt.Sprintf("; did you mean %q?", p.Name)
	}
	if len(ps.List) == 0 {
		return fmt.Errorf("%w: %s URL: unknown parameter %q; this backend takes none", ErrInvalidOption, ps.Backend, k)
	}
	var own, lib []string
	for _, p := range ps.List {
		if p.Set != nil {
			own = append(own, p.Name)
		} else {
			lib = append(lib, p.Name)
		}
	}
	valid := strings.Join(own, ", ")
	if len(lib) > 0 {
		valid += "; the client library's: " + strings.Join(lib, ", ")
	}
	return fmt.Errorf("%w: %s URL: unknown parameter %q%s (valid: %s)", ErrInvalidOption, ps.Backend, k, hint, valid)
}

// Closest returns the candidate nearest to word, if it is a near miss (at
// most two edits away; the first of equals), else "": for "did you mean"
// in errors.
func Closest(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// BoolParam returns a Set that parses a boolean (true, false, 1, 0, …)
// into dst.
func BoolParam(dst *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		*dst = b
		return nil
	}
}

// DurationParam returns a Set that parses a positive Go duration (10s,
// 1m30s) into dst.
func DurationParam(dst *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 10s")
		}
		*dst = d
		return nil
	}
}

// ChoiceParam returns a Set that accepts one of valid (as written) into
// dst; any other value is refused with the list of valid ones.
func ChoiceParam(dst *string, valid ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(valid, v) {
			return fmt.Errorf("want one of %s", strings.Join(valid, ", "))
		}
		*dst = v
		return nil
	}
}

// StringParam returns a Set that stores the value in dst.
func StringParam(dst *string) func(string) error {
	return func(v string) error {
		*dst = v
		return nil
	}
}

type loggerKey struct{}

// WithLogger returns a context that carries l to a backend's opener:
// dlock.Open passes the logger of its dlock.WithLogger option this way.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger ctx carries (see WithLogger), else
// slog.Default(). Backends log deprecation warnings on it, and route the
// log lines of their engine's client library to it at debug level: the
// errors that matter reach the caller as errors.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
