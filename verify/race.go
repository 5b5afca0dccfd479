package verify

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
)

// raceExitCode is the exit status a program built with -race gives when it
// would have exited 0 but the race detector reported a data race (GORACE's
// exitcode, 66 by default). The runtime changes only a clean exit's status,
// so a client process that exits with it ran its workload to the end and
// recorded its whole history.
const raceExitCode = 66

// dlockModule prefixes every package of this project.
const dlockModule = "github.com/dlock/dlock"

// foreignRaces reads the race detector's reports in a client process's log
// and, when there is at least one and neither access of any of them has a
// frame of dlock's code, says so and names the packages the accesses were
// in: a race inside a dependency (the Temporal SDK evicting a workflow
// from its cache while a workflow task runs, for one). It returns "" when
// the log has no report, or one report has a frame of dlock's code in an
// access: that exit stays a violation. The stacks of where the goroutines
// were created are not looked at (dlock starts the dependency's workers);
// the stack where a racy heap block was allocated ("Location is heap
// block … allocated by") is, like an access's.
func foreignRaces(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var (
		reports  int
		inReport bool
		inAccess bool
		pkgs     = map[string]bool{}
		ours     bool
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "WARNING: DATA RACE":
			reports++
			inReport, inAccess = true, false
		case !inReport:
		case strings.HasPrefix(line, "=================="):
			inReport, inAccess = false, false
		case line == "" || line[0] != ' ':
			// A section's header: an access ("Write at 0x… by goroutine
			// 7:", "Previous read at …") or a goroutine's creation.
			inAccess = strings.Contains(line, " at 0x") && !strings.HasPrefix(line, "Goroutine ")
		case inAccess && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   "):
			p := framePackage(strings.TrimSpace(line))
			ours = ours || p == dlockModule || strings.HasPrefix(p, dlockModule+"/")
			pkgs[p] = true
		}
	}
	if sc.Err() != nil || reports == 0 || ours || inReport {
		return ""
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	return fmt.Sprintf("the race detector's %d report(s) have no frame of dlock's code in either access, only of %s; the runtime changes only a clean exit's status, so the history is whole",
		reports, strings.Join(names, ", "))
}

// framePackage is the import path of a frame's function
// ("go.temporal.io/sdk/internal.(*x).f()" → "go.temporal.io/sdk/internal",
// "slices.Reverse[...]()" → "slices").
func framePackage(fn string) string {
	if i := strings.IndexAny(fn, "[("); i >= 0 {
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}
