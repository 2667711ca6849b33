package modcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelease runs scripts/release on a copy of the repository's tracked
// files: every module requires its siblings at the new version, every
// published module is tagged, and the unpublished ones are not.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("vets every module; not in -short")
	}
	r := root(t)
	dir := t.TempDir()
	git := func(d string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// The working tree's tracked files as they are now, changes included.
	for _, f := range strings.Split(git(r, "ls-files", "-z"), "\x00") {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r, f))
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join(r, f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	git(dir, "init", "-q")
	git(dir, "add", "-A")
	git(dir, "commit", "-q", "-m", "copy")

	cmd := exec.Command(filepath.Join(dir, "scripts", "release"), "v0.99.0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release v0.99.0: %v\n%s", err, out)
	}

	tags := map[string]bool{}
	for _, tag := range strings.Fields(git(dir, "tag")) {
		tags[tag] = true
	}
	for _, d := range workspace(t, r) {
		want := d + "/v0.99.0"
		if d == "." {
			want = "v0.99.0"
		}
		published := d != "bench" && d != "examples" && d != "fencesql/internal/drivertest" && d != "fencegocron/internal/schedtest"
		if tags[want] != published {
			t.Errorf("module %s: tag %s present = %v, want %v", d, want, tags[want], published)
		}
		mod, err := os.ReadFile(filepath.Join(dir, d, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(mod), "\n") {
			f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "require "))
			if len(f) >= 2 && strings.HasPrefix(f[0], "github.com/fencing/fence") && strings.HasPrefix(f[1], "v") && f[1] != "v0.99.0" {
				t.Errorf("%s/go.mod after the release: %q, want v0.99.0", d, strings.TrimSpace(l))
			}
		}
	}
	if out := git(dir, "status", "--porcelain"); out != "" {
		t.Errorf("the release left changes uncommitted:\n%s", out)
	}
}
