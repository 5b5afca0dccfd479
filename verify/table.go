package verify

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the summary table of results, one row per run: the
// workload, the client operations invoked, the leases granted, the most
// holds of one name at once, the holds that overlapped a
// newer one (and how many of those were excused, and why), the stale writes the
// fenced register refused, the lease-loss notifications clients received,
// the longest time from a heal to the next grant, and the verdict.
func WriteTable(w io.Writer, results []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tworkload\tfault\toperations\tgrants\tmost held\toverlaps\trefused stale writes\tloss notifications\trecovery\tverdict")
	noted := false
	for _, r := range results {
		rec := "-"
		if r.Recovery > 0 {
			rec = r.Recovery.Round(time.Millisecond).String()
		}
		overlaps := fmt.Sprint(r.Overlaps)
		if r.Overlaps > 0 {
			overlaps = fmt.Sprintf("%d (%d excused", r.Overlaps, r.Explained)
			if e := r.ExcusedSummary(); e != "" {
				overlaps += ": " + e
			}
			overlaps += ")"
		}
		verdict := r.Verdict()
		if len(r.Notes) > 0 {
			verdict += " *"
			noted = true
		}
		workload := r.Workload
		if workload == "" {
			workload = string(WorkloadMutex)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n", r.Backend, workload, r.Fault, r.Ops, r.Grants, r.MostHeld, overlaps, r.Refused, r.Losses, rec, verdict)
	}
	tw.Flush()
	if noted {
		fmt.Fprintln(w, "* the run has notes: facts that break no property (Result.Notes), printed with it")
	}
}
