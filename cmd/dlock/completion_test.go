package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBashCompletionOffersCommandsAndFlags loads "dlock completion bash"
// into a real bash and runs its completion function as bash would on TAB,
// for each command line below (the last word is the one being completed).
// The script is generated once, and each line's bash loads the same file:
// every start of the CLI's test binary costs a second or two.
func TestBashCompletionOffersCommandsAndFlags(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	gen := runDlock(t, cleanEnv(), "completion", "bash")
	if gen.code != 0 {
		t.Fatalf("dlock completion bash: %s", gen)
	}
	script := filepath.Join(t.TempDir(), "dlock.bash")
	if err := os.WriteFile(script, []byte(gen.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	var visible []string
	for _, c := range commands() {
		if !c.hidden {
			visible = append(visible, c.name)
		}
	}
	for _, tc := range []struct {
		line []string
		want string
	}{
		{[]string{"dlock", ""}, strings.Join(visible, " ") + " --backend --version"},
		{[]string{"dlock", "ru"}, "run"},
		{[]string{"dlock", "--backend", "etcd://h:2379", "insp"}, "inspect"},
		{[]string{"dlock", "run", "--t"}, "--timeout --ttl"},
		{[]string{"dlock", "run", "--ttl", "5s", "--no"}, "--no-wait --note"},
		{[]string{"dlock", "--backend", "etcd://h:2379", "inspect", "--j"}, "--json"},
		{[]string{"dlock", "demo", ""}, "seckill fencing"},
		{[]string{"dlock", "demo", "seckill", "--w"}, "--workers"},
		{[]string{"dlock", "dev", "--"}, "--allow-remote --data-dir --listen --metrics-addr"},
		{[]string{"dlock", "run", "--m"}, "--metrics-addr"},
		{[]string{"dlock", "run", "--l"}, "--limit"},
		{[]string{"dlock", "bench", "--a"}, "--allow-remote"},
		{[]string{"dlock", "bench", "--p"}, "--primitive"},
		{[]string{"dlock", "bench", "--primitive", "rwmutex", "--r"}, "--readers"},
		{[]string{"dlock", "verify", "--f"}, "--faults"},
		{[]string{"dlock", "ui", "--allow"}, "--allow-break --allow-remote"},
		{[]string{"dlock", "completion", ""}, "bash zsh fish"},
		{[]string{"dlock", "run", "job", "--", ""}, ""}, // CMD: the shell's own completion
	} {
		quoted := make([]string, len(tc.line))
		for i, w := range tc.line {
			quoted[i] = "'" + w + "'"
		}
		complete := `source "$SCRIPT" || exit 1
complete -p dlock >/dev/null || exit 1
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMPREPLY=()
_dlock
echo "${COMPREPLY[*]}"`
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", complete)
		cmd.Env = cleanEnv("SCRIPT=" + script)
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("completing %q: %q (%v); want %q", tc.line, got, err, tc.want)
		}
	}
}

// The zsh and fish scripts are generated from the same command table; they
// are checked here for what they must contain (zsh and fish themselves are
// not installed on every machine that runs the tests).
func TestZshAndFishCompletionNameEveryCommand(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		r := runDlock(t, cleanEnv(), "completion", shell)
		if r.code != 0 {
			t.Fatalf("dlock completion %s: %s", shell, r)
		}
		for _, c := range commands() {
			if !c.hidden && !strings.Contains(r.stdout, c.name) {
				t.Errorf("dlock completion %s does not name %s", shell, c.name)
			}
		}
		if !strings.Contains(r.stdout, "--workers") && !strings.Contains(r.stdout, "-l workers") {
			t.Errorf("dlock completion %s does not offer demo seckill's --workers:\n%s", shell, r.stdout)
		}
	}
	if r := runDlock(t, cleanEnv(), "completion", "tcsh"); r.code != exitUsage {
		t.Errorf("dlock completion tcsh: %s; want status %d", r, exitUsage)
	}
}
