package torture

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// writeHTML writes porcupine's visualization of r's history to path, with
// the leases (as their holders believed in them) and the faults as
// annotations.
func writeHTML(r *Result, events []Event, path string) error {
	var notes []porcupine.Annotation
	for _, l := range r.leases {
		notes = append(notes, porcupine.Annotation{
			ClientId:        l.W,
			Start:           l.From,
			End:             l.To,
			Description:     strings.TrimSpace(fmt.Sprintf("%s lease tok %d", l.Kind, l.Token)),
			Details:         fmt.Sprintf("worker %d believed it held %q with token %d", l.W, l.Key, l.Token),
			BackgroundColor: "#e8f0ff",
		})
	}
	// Episodes do not overlap: each end closes the last start.
	var start *Event
	for _, e := range events {
		switch {
		case e.Op == OpKill:
			notes = append(notes, porcupine.Annotation{Tag: "faults", Start: e.T, End: e.T,
				Description: fmt.Sprintf("kill worker %d", e.W), BackgroundColor: "#ffd0d0"})
		case e.Op == OpFault && !e.End:
			start = &e
		case e.Op == OpFault && start != nil:
			notes = append(notes, porcupine.Annotation{Tag: "faults", Start: start.T, End: e.T,
				Description: start.Fault, Details: start.Fault + "; then " + e.Fault, BackgroundColor: "#ffe0b0"})
			start = nil
		}
	}
	info := r.info
	info.AddAnnotations(notes)
	return porcupine.VisualizePath(FencedRegister, info, path)
}
