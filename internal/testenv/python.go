package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Python is Debian's interpreter, named explicitly: a python3 earlier on
// PATH (a virtualenv, pyenv) does not see Debian's python3-* packages,
// which the compat-mode tests run as the foreign clients.
const Python = "/usr/bin/python3"

// InteropInstall is the command that installs the foreign lock clients.
const InteropInstall = "sudo scripts/install-interop.sh"

// RequirePython returns Python once it imports every module of pkg (a
// Debian package such as python3-redis, whose module is the name after
// "python3-"), or stops the test with Missing: a skip, or a failure
// under DLOCK_REQUIRE (all, or the package's name).
func RequirePython(t testing.TB, pkg string) string {
	t.Helper()
	module := strings.TrimPrefix(pkg, "python3-")
	out, err := exec.Command(Python, "-c", "import "+module).CombinedOutput()
	if err != nil {
		Missing(t, pkg, InteropInstall, fmt.Errorf("%s cannot import %s: %v: %s", Python, module, err, strings.TrimSpace(string(out))))
	}
	return Python
}

// StartLines starts cmd, its stderr the test's, and returns a reader of
// its stdout lines; the process is killed and waited for when the test
// ends.
func StartLines(t testing.TB, cmd *exec.Cmd) *bufio.Scanner {
	t.Helper()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return bufio.NewScanner(out)
}
