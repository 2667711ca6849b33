package torture

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Table formats results as the summary table. It has a kind column only
// when a result is of another kind than locks.
func Table(rs []*Result) string {
	withKinds := false
	for _, r := range rs {
		withKinds = withKinds || (r.Kind != "" && r.Kind != KindLock)
	}
	kindCol := func(r *Result) string {
		switch {
		case !withKinds:
			return ""
		case r.Kind == KindSemaphore:
			return fmt.Sprintf("semaphore(%d)\t", r.Limit)
		case r.Kind == "":
			return string(KindLock) + "\t"
		}
		return string(r.Kind) + "\t"
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "store\tfault\tguard\t"
	if withKinds {
		head += "kind\t"
	}
	fmt.Fprintln(tw, head+"acquisitions\toverlaps\tstale refused\tstale accepted\tlinearizable\tlosses detected\tdetected after p50/p99\twrites\tunknown\tfaults\tacquire errors\tnext grant\t")
	for _, r := range rs {
		g := "yes"
		if !r.Guard {
			g = "no"
		}
		if r.NA != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%sn/a\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Store, r.Fault, g, kindCol(r))
			continue
		}
		lin := map[string]string{"Ok": "yes", "Illegal": "NO", "Unknown": "unknown"}[string(r.Linearizable)]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%d\t%d\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t\n", r.Store, r.Fault, g, kindCol(r),
			r.Acquisitions, r.Overlaps, r.StaleRefused, r.StaleAccepted, lin, r.Losses, lossDetect(r.LossDetect), r.Writes, r.Unknown, r.Faults, r.AcquireErrors, nextGrant(r.NextGrant))
	}
	tw.Flush()
	return b.String()
}

// nextGrant shows the longest time from an episode's start to the next
// grant: "-" when not measured; with the number of episodes that saw no
// grant before the plan ended (often the last, too close to the end),
// "none" if no episode saw one.
func nextGrant(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	longest, none := time.Duration(-1), 0
	for _, d := range ds {
		if d < 0 {
			none++
			continue
		}
		longest = max(longest, d)
	}
	switch {
	case longest < 0:
		return "none"
	case none > 0:
		return fmt.Sprintf("%v (%d none)", longest.Round(10*time.Millisecond), none)
	}
	return longest.Round(10 * time.Millisecond).String()
}

// lossDetect shows the median and the 99th percentile of the times from a
// fault's start to a holder's detection of its loss: "-" for none.
func lossDetect(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return r(percentile(ds, 50)) + "/" + r(percentile(ds, 99))
}

// Markdown formats results as docs/reliability.md's matrix: a verdict per
// store (and lease kind) and fault, for the guarded plans, then a row per
// plan with its figures. A verdict is "ok" (nothing wrong), "FAIL" (a
// check failed: with the guard, a defect), "shown" (a plan without the
// guard that shows the corruption, as it must) or "n/a".
func Markdown(rs []*Result) string {
	var b strings.Builder
	var faults []Fault
	var rows []string
	cells := map[string]map[Fault]string{}
	for _, r := range rs {
		row := r.Store
		if r.Kind != "" && r.Kind != KindLock {
			row += " (" + string(r.Kind) + ")"
		}
		if !r.Guard {
			row += ", no guard"
		}
		if cells[row] == nil {
			cells[row] = map[Fault]string{}
			rows = append(rows, row)
		}
		if !slices.Contains(faults, r.Fault) {
			faults = append(faults, r.Fault)
		}
		cells[row][r.Fault] = verdict(r)
	}
	b.WriteString("| store |")
	for _, f := range faults {
		fmt.Fprintf(&b, " %s |", f)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(faults)) + "\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row)
		for _, f := range faults {
			v := cells[row][f]
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| store | fault | guard | acquisitions | overlaps (bound) | stale refused | stale accepted | token regressions | losses detected | detected after p50/p99 | next grant |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rs {
		store := r.Store
		if r.Kind != "" && r.Kind != KindLock {
			store += " (" + string(r.Kind) + ")"
		}
		g := "yes"
		if !r.Guard {
			g = "no"
		}
		if r.NA != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | n/a: %s | | | | | | | |\n", store, r.Fault, g, strings.ReplaceAll(r.NA, "|", "/"))
			continue
		}
		bound := "any"
		if n, ok := overlapBound[r.Fault]; ok {
			bound = fmt.Sprint(n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d (%s) | %d | %d | %d | %d | %s | %s |\n", store, r.Fault, g,
			r.Acquisitions, r.Overlaps, bound, r.StaleRefused, r.StaleAccepted, r.TokenRegressions, r.Losses, lossDetect(r.LossDetect), nextGrant(r.NextGrant))
	}
	return b.String()
}

// verdict is a plan's cell in the matrix.
func verdict(r *Result) string {
	switch {
	case r.NA != "":
		return "n/a"
	case !r.Guard && !r.OK():
		return "shown"
	case r.OK() && r.StaleAccepted == 0:
		return "ok"
	}
	return "FAIL"
}
