package verify

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the summary table of results: one row per run.
func WriteTable(w io.Writer, results []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tfault\toperations\tgrants\toverlaps\trefused stale writes\tloss notifications\trecovery\tverdict")
	for _, r := range results {
		rec := "-"
		if r.Recovery > 0 {
			rec = r.Recovery.Round(time.Millisecond).String()
		}
		overlaps := fmt.Sprint(r.Overlaps)
		if r.Overlaps > 0 {
			overlaps = fmt.Sprintf("%d (%d explained)", r.Overlaps, r.Explained)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n", r.Backend, r.Fault, r.Ops, r.Grants, overlaps, r.Refused, r.Losses, rec, r.Verdict())
	}
	tw.Flush()
}
