package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestMarkdown: the matrix gives each plan its verdict, and the rows their
// figures; a guarded plan that failed is FAIL, never ok.
func TestMarkdown(t *testing.T) {
	rs := []*Result{
		{Store: "etcd-cluster", Fault: FaultPartition, Guard: true, Linearizable: porcupine.Ok, Acquisitions: 4, Losses: 1,
			LossDetect: []time.Duration{450 * time.Millisecond}, NextGrant: []time.Duration{3140 * time.Millisecond}},
		{Store: "etcd-cluster", Fault: FaultPause, Guard: true, Linearizable: porcupine.Ok, Overlaps: 3, StaleRefused: 2},
		{Store: "etcd-cluster", Fault: FaultPause, Guard: false, Linearizable: porcupine.Illegal, StaleAccepted: 2, Violations: []string{"stale"}},
		{Store: "redis", Fault: FaultPartition, Guard: true, NA: "not a cluster"},
		{Store: "redis", Fault: FaultPause, Guard: true, Linearizable: porcupine.Ok, TokenRegressions: 1, Violations: []string{"tokens went back"}},
	}
	md := Markdown(rs)
	for _, want := range []string{
		"| store | partition | pause |",
		"| etcd-cluster | ok | ok |",
		"| etcd-cluster, no guard | - | shown |",
		"| redis | n/a | FAIL |",
		"| etcd-cluster | partition | yes | 4 | 0 (0) | 0 | 0 | 0 | 1 | 450ms/450ms | 3.14s |",
		"| etcd-cluster | pause | yes | 0 | 3 (any) |",
		"| redis | pause | yes | 0 | 0 (any) | 0 | 0 | 1 |",
		"| redis | partition | yes | n/a: not a cluster |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
