package fence

import (
	"testing"

	"github.com/fencing/fence/internal/kit/rwpref"
)

// A waiting writer's mark (rwpref) outlives the longest pause between two
// attempts of a waiting acquisition, each of which renews it: else readers
// slip in between and starve the writer.
func TestWriterMarkOutlivesPolling(t *testing.T) {
	if 2*maxPoll > rwpref.MinIntent {
		t.Errorf("rwpref.MinIntent %v is less than twice maxPoll %v", rwpref.MinIntent, maxPoll)
	}
}
