//go:build race

package verify

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestForeignRacesOnARealReport runs processes built with the race detector
// that race and then exit 0: each must exit with raceExitCode, and its
// report is excused when the race is in the standard library alone, not
// when it is in this package's code.
func TestForeignRacesOnARealReport(t *testing.T) {
	for _, mode := range []string{"foreign", "ours"} {
		path := filepath.Join(t.TempDir(), mode+".log")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), raceChildEnv+"="+mode)
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		f.Close()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != raceExitCode {
			t.Fatalf("%s: the racing process exited with %v, want status %d", mode, err, raceExitCode)
		}
		got := foreignRaces(path)
		switch {
		case mode == "foreign" && !strings.Contains(got, "bytes"):
			b, _ := os.ReadFile(path)
			t.Errorf("a race in the standard library alone is not excused (%q):\n%s", got, b)
		case mode == "ours" && got != "":
			t.Errorf("a race in dlock's code is excused: %q", got)
		}
	}
}
