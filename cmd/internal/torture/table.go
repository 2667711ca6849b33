package torture

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Table formats results as the summary table.
func Table(rs []*Result) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tfault\tguard\tacquisitions\toverlaps\tstale refused\tstale accepted\tlinearizable\tlosses detected\twrites\tunknown\tfaults\t")
	for _, r := range rs {
		g := "yes"
		if !r.Guard {
			g = "no"
		}
		if r.NA != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\tn/a\t\t\t\t\t\t\t\t\t\n", r.Store, r.Fault, g)
			continue
		}
		lin := map[string]string{"Ok": "yes", "Illegal": "NO", "Unknown": "unknown"}[string(r.Linearizable)]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t\n", r.Store, r.Fault, g,
			r.Acquisitions, r.Overlaps, r.StaleRefused, r.StaleAccepted, lin, r.Losses, r.Writes, r.Unknown, r.Faults)
	}
	tw.Flush()
	return b.String()
}
