package storeurl

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

func init() {
	register("file", scheme{open: openFile, local: true,
		forms: []string{"file:///path/to/dir", "a directory path: /abs/dir, ./rel/dir, ../dir, ~/dir"}})
}

// openFile opens file:///abs/dir (or file://localhost/abs/dir), the URL
// Parse makes of a plain path.
func openFile(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	switch {
	case u.Opaque != "":
		return nil, nil, badURL(u, "a file URL needs an absolute path: file:///path/to/dir")
	case u.Host != "" && u.Host != "localhost":
		return nil, nil, badURL(u, "a file store is on this host only; host %q not allowed", u.Host)
	case u.Path == "" || !filepath.IsAbs(u.Path):
		return nil, nil, badURL(u, "a file URL needs an absolute path: file:///path/to/dir")
	case u.RawQuery != "":
		return nil, nil, badURL(u, "a file URL takes no parameters")
	}
	s, err := fencefile.New(u.Path)
	if err != nil {
		return nil, nil, err
	}
	return s, nopCloser{}, nil
}

// DefaultDir returns the fence command's default file store directory,
// per user: $XDG_STATE_HOME/fence if XDG_STATE_HOME is set to an absolute
// path, else ~/.local/state/fence.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "fence"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("no default store: neither XDG_STATE_HOME nor HOME is set; use --store or FENCE_STORE")
	}
	return filepath.Join(home, ".local", "state", "fence"), nil
}
