package modgraph_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	etcdServer = "go.etcd.io/etcd/server/v3"
	grpc       = "google.golang.org/grpc"
	porcupine  = "github.com/anishathalye/porcupine"
	otel       = "go.opentelemetry.io/otel"
	prometheus = "github.com/prometheus/client_golang"
)

// clients are the engines' client modules: a program that uses one backend
// gets its engine's client and no other.
var clients = []string{
	"go.etcd.io/etcd/client/v3",
	"github.com/redis/go-redis/v9",
	"github.com/go-zookeeper/zk",
	"github.com/jackc/pgx/v5",
	"github.com/go-sql-driver/mysql",
	"go.temporal.io/sdk",
}

// consumers are the programs in testdata: the directory, the engine
// client the backend it imports is built on ("" for none), and whether it
// imports dlockotel.
var consumers = []struct {
	dir       string
	client    string
	telemetry bool
}{
	{"portable", "", false},
	{"dlockotel", "", true},
	{"etcdlock", "go.etcd.io/etcd/client/v3", false},
	{"redislock", "github.com/redis/go-redis/v9", false},
	{"redlock", "github.com/redis/go-redis/v9", false},
	{"zklock", "github.com/go-zookeeper/zk", false},
	{"pglock", "github.com/jackc/pgx/v5", false},
	{"mysqllock", "github.com/go-sql-driver/mysql", false},
	{"temporallock", "go.temporal.io/sdk", false},
}

// TestBackendModuleGraphs resolves each consumer program as a module of its
// own (outside the workspace, through its replace directives, as a user's
// module would resolve published versions) and checks its module graph:
// no etcd server, no Temporal SDK unless it is the backend's client, no
// engine client but its own, nothing from the verification, gRPC only for
// the backends whose client speaks it, OpenTelemetry only for the program
// that imports dlockotel, and Prometheus for neither of those two (the
// CLI brings it; the etcd client does too). The consumer's go.mod is
// copied, not edited: a backend whose requirements grew shows here, with
// the module that came in.
func TestBackendModuleGraphs(t *testing.T) {
	for _, c := range consumers {
		t.Run(c.dir, func(t *testing.T) {
			mods := moduleGraph(t, filepath.Join("testdata", c.dir))
			t.Logf("%s: %d modules in go list -m all", c.dir, len(mods))
			if !slices.Contains(mods, "github.com/dlock/dlock") {
				t.Fatalf("the graph lacks dlock itself: %v", mods)
			}
			if c.client != "" && !slices.Contains(mods, c.client) {
				t.Errorf("the graph lacks the backend's own client %s: %v", c.client, mods)
			}
			unwanted := []string{etcdServer, porcupine}
			for _, cl := range clients {
				if cl != c.client {
					unwanted = append(unwanted, cl)
				}
			}
			if c.client != "go.etcd.io/etcd/client/v3" && c.client != "go.temporal.io/sdk" {
				unwanted = append(unwanted, grpc)
			}
			if c.telemetry && !slices.Contains(mods, otel) {
				t.Errorf("the graph of a program importing dlockotel lacks %s: %v", otel, mods)
			}
			if c.client == "" {
				unwanted = append(unwanted, prometheus)
				if !c.telemetry {
					unwanted = append(unwanted, otel)
				}
			}
			for _, m := range unwanted {
				if slices.Contains(mods, m) {
					t.Errorf("a program importing only dlock and %s gets %s in its module graph", c.dir, m)
				}
			}
		})
	}
}

// TestPortableLayerNeedsNothing: dlock, driver, dlocktest and memlock need
// nothing outside the standard library; in particular, importing dlock
// pulls in nothing of OpenTelemetry (dlockotel is a module of its own).
func TestPortableLayerNeedsNothing(t *testing.T) {
	mods := moduleGraph(t, filepath.Join("testdata", "portable"))
	if want := []string{"example.com/consumer/portable", "github.com/dlock/dlock"}; !slices.Equal(mods, want) {
		t.Errorf("the portable layer's module graph is %v, want %v", mods, want)
	}
}

// moduleGraph resolves every import of the consumer module in dir (go list
// -deps, which needs the same requirements as a build but compiles
// nothing: building the Temporal SDK and etcd's client took minutes of
// every test run), with a copy of its go.mod and go.sum that go may
// complete, and returns the paths of go list -m all, in order.
func moduleGraph(t *testing.T, dir string) []string {
	t.Helper()
	tmp := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		copyFile(t, filepath.Join(dir, f), filepath.Join(tmp, f))
	}
	modfile := "-modfile=" + filepath.Join(tmp, "go.mod")
	run(t, dir, "list", "-mod=mod", modfile, "-deps", ".")
	var mods []string
	for _, l := range strings.Split(strings.TrimSpace(run(t, dir, "list", "-mod=mod", modfile, "-m", "all")), "\n") {
		mods = append(mods, strings.Fields(l)[0])
	}
	return mods
}

// run runs the go command in dir, outside the workspace.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %s", strings.Join(args, " "), dir, msg)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
