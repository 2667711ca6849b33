package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fence run --resume takes back the lease named by FENCE_OWNER and
// FENCE_TOKEN after its fence run was killed, keeping the token; another
// owner is refused (exit 75), a lease no longer held is a loss (exit 76),
// and a missing environment or --wait is a usage error.
func TestRunResume(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fence.db")
	e := &env{t: t, home: t.TempDir(), store: "sqlite://" + db}
	out := filepath.Join(t.TempDir(), "out")
	h, _ := e.start("run", "--json", "--ttl", "20s", "--key", "k", "--", "sh", "-c",
		`echo "$FENCE_OWNER $FENCE_TOKEN" > `+out+`.tmp; mv `+out+`.tmp `+out+`; exec sleep 60`)
	eventually(t, "command started", func() bool {
		_, err := os.Stat(out)
		return err == nil
	})
	data, _ := os.ReadFile(out)
	owner, tok, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	h.wait(t)

	e.environ = []string{"FENCE_OWNER=" + owner}
	if r := e.run("run", "--resume", "--key", "k", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "FENCE_TOKEN") {
		t.Errorf("--resume without FENCE_TOKEN: exit %d, want 2; stderr:\n%s", r.code, r.stderr)
	}
	e.environ = []string{"FENCE_OWNER=" + owner, "FENCE_TOKEN=" + tok}
	if r := e.run("run", "--resume", "--wait", "1s", "--key", "k", "--", "true"); r.code != 2 {
		t.Errorf("--resume with --wait: exit %d, want 2; stderr:\n%s", r.code, r.stderr)
	}
	e.environ = []string{"FENCE_OWNER=someone-else", "FENCE_TOKEN=" + tok}
	if r := e.run("run", "--resume", "--key", "k", "--", "true"); r.code != 75 {
		t.Errorf("--resume with another owner: exit %d, want 75; stderr:\n%s", r.code, r.stderr)
	}
	e.environ = []string{"FENCE_OWNER=" + owner, "FENCE_TOKEN=" + tok}
	r := e.run("run", "--resume", "--key", "k", "--", "sh", "-c", `echo "$FENCE_OWNER $FENCE_TOKEN"`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != owner+" "+tok {
		t.Errorf("--resume with the lease's owner and token: exit %d, stdout %q; want 0, %q; stderr:\n%s", r.code, r.stdout, owner+" "+tok, r.stderr)
	}
	// Released by the resumed run: nothing left to resume.
	if r := e.run("run", "--resume", "--key", "k", "--", "true"); r.code != 76 || !strings.Contains(r.stderr, "no longer held") {
		t.Errorf("--resume of a released lease: exit %d, want 76; stderr:\n%s", r.code, r.stderr)
	}
}
