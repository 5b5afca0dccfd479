package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CuratorJars is the class path of a program that uses Debian's Curator
// (libcurator-recipes-java): the recipes jar names curator-client,
// curator-framework, guava, slf4j-api and the ZooKeeper jars in its
// manifest; slf4j-nop silences the client's log.
var CuratorJars = []string{"/usr/share/java/curator-recipes.jar", "/usr/share/java/slf4j-nop.jar"}

// JavaProgram compiles one Java source file (its class the file's base
// name) against the jars into a temporary directory, and returns a
// function that makes the command to run it with args. A missing javac or
// java, or a missing jar, stops the test with Missing under the name of
// the Debian package pkg (a failure under DLOCK_REQUIRE=all).
func JavaProgram(t testing.TB, pkg, src string, jars []string) func(args ...string) *exec.Cmd {
	t.Helper()
	javac := LookPath(t, pkg, InteropInstall, []string{"javac"}, "/usr/lib/jvm/*/bin")
	java := filepath.Join(filepath.Dir(javac), "java")
	for _, j := range jars {
		if _, err := os.Stat(j); err != nil {
			Missing(t, pkg, InteropInstall, err)
		}
	}
	dir := t.TempDir()
	cp := strings.Join(jars, string(os.PathListSeparator))
	if out, err := exec.Command(javac, "-nowarn", "-cp", cp, "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac %s: %v\n%s", src, err, out)
	}
	class := strings.TrimSuffix(filepath.Base(src), ".java")
	runCP := dir + string(os.PathListSeparator) + cp
	return func(args ...string) *exec.Cmd {
		return exec.Command(java, append([]string{"-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", runCP, class}, args...)...)
	}
}
