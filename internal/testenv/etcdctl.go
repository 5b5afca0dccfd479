package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Etcdctl returns the path of etcdctl, version 3 (Debian's etcd-client,
// which the compat=etcdctl tests run as the foreign client), or stops the
// test with Missing: a skip, or a failure under DLOCK_REQUIRE (all, or
// etcd-client).
func Etcdctl(t testing.TB) string {
	t.Helper()
	bin := LookPath(t, "etcd-client", InteropInstall, []string{"etcdctl"}, "/usr/bin")
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "etcdctl version: 3.") {
		Missing(t, "etcd-client", InteropInstall, fmt.Errorf("%s version: %v: %q; want version 3", bin, err, strings.TrimSpace(string(out))))
	}
	return bin
}

// Etcdctl returns the command etcdctl ARGS against e, speaking etcd's v3
// API (etcdctl 3.4 does by default; ETCDCTL_API=3 says so for older ones).
func (e *Etcd) Etcdctl(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Etcdctl(t), append([]string{"--endpoints=" + strings.Join(e.Endpoints(), ",")}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	return cmd
}
