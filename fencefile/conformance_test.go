package fencefile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
	"github.com/fencing/fence/fencetest"
)

// No Store.KillSession: a lock is held by its holder's open file, and the
// kernel frees it when the process dies (the suite's HolderDies).
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			s, err := fencefile.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return fencetest.Store{
				Connect: s.Dir(),
				Delete: func(_ context.Context, key string) error {
					return s.Delete(key)
				},
				// A lost state directory, as a tmpfs after a reboot: every
				// file of the key goes (its lock file, and for the other
				// kinds its counter and slot files, all named after the
				// lock file).
				Wipe: func(_ context.Context, key string) error {
					base := strings.TrimSuffix(filepath.Base(s.Path(key)), ".lock")
					entries, err := os.ReadDir(s.Dir())
					if err != nil {
						return err
					}
					for _, e := range entries {
						if e.Name() == base+".lock" || strings.HasPrefix(e.Name(), base+".") {
							if err := os.Remove(filepath.Join(s.Dir(), e.Name())); err != nil {
								return err
							}
						}
					}
					return nil
				},
				// Lock files stay (they keep the token counters); what must
				// not stay is a held lock or a stray temporary file.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := s.List(ctx, prefix)
					if err != nil {
						return nil, err
					}
					var left []string
					for _, h := range hs {
						left = append(left, "held: "+h.Key)
					}
					entries, err := os.ReadDir(s.Dir())
					if err != nil {
						return nil, err
					}
					for _, e := range entries {
						if strings.HasPrefix(e.Name(), ".") {
							left = append(left, "temporary file: "+e.Name())
						}
					}
					return left, nil
				},
			}
		},
		Open: func(dir string) (fence.Driver, func() error, error) {
			s, err := fencefile.New(dir)
			return s, nil, err
		},
	})
}
