package testserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Empty restarts: a server brought back with the data directory it had
// before it held anything, as a machine that lost its disk, or a container
// restarted without a volume, would be.

var (
	emptyMu     sync.Mutex
	emptyCopies = map[*Process]string{} // a server's saved empty data directory
)

// SaveEmpty kills the server, keeps a copy of its data directory as its
// empty state, and starts it again; it returns how long the start took.
// Call it before the server holds data a test means to lose: at once after
// the server started.
func (p *Process) SaveEmpty() (time.Duration, error) {
	p.mu.Lock()
	err := p.killLocked()
	p.mu.Unlock()
	if err != nil {
		return 0, err
	}
	saved := p.dir + ".empty"
	if err := os.RemoveAll(saved); err != nil {
		return 0, err
	}
	if err := copyTree(p.dir, saved); err != nil {
		return 0, fmt.Errorf("testserver: saving %s's empty data directory: %w", p.name, err)
	}
	p.tb.Cleanup(func() { _ = os.RemoveAll(saved) })
	emptyMu.Lock()
	emptyCopies[p] = saved
	emptyMu.Unlock()
	start := time.Now()
	err = p.start()
	return time.Since(start), err
}

// RestartEmpty kills the server, puts back the data directory SaveEmpty
// saved, waits down and starts the server again. Unlike Restart it
// returns its error, so any goroutine may call it.
func (p *Process) RestartEmpty(down time.Duration) error {
	emptyMu.Lock()
	saved, ok := emptyCopies[p]
	emptyMu.Unlock()
	if !ok {
		return fmt.Errorf("testserver: %s: RestartEmpty without SaveEmpty", p.name)
	}
	p.mu.Lock()
	err := p.killLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.emptyDir(saved); err != nil {
		return fmt.Errorf("testserver: emptying %s's data directory: %w", p.name, err)
	}
	time.Sleep(down)
	return p.start()
}

// EmptyDir kills the server and puts back the data directory SaveEmpty
// saved, leaving the server down: for servers that must come back in an
// order (an API server after its store).
func (p *Process) EmptyDir() error {
	emptyMu.Lock()
	saved, ok := emptyCopies[p]
	emptyMu.Unlock()
	if !ok {
		return fmt.Errorf("testserver: %s: EmptyDir without SaveEmpty", p.name)
	}
	p.mu.Lock()
	err := p.killLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.emptyDir(saved)
}

// Start starts a server that Kill or EmptyDir left down, and waits until
// it answers. Unlike Restart it returns its error.
func (p *Process) Start() error { return p.start() }

func (p *Process) emptyDir(saved string) error {
	if err := clearDir(p.dir); err != nil {
		return err
	}
	return copyTree(saved, p.dir)
}

// clearDir removes everything in dir, and keeps dir.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the directories, regular files and symbolic links under
// from into to, with their modes and owners (a server may run as another
// user); sockets and other special files are left out.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.MkdirAll(dst, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(dst, fi.Mode().Perm()); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(path, dst, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // a socket or a pipe: the server makes a new one
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, fs.ErrPermission) {
				return err
			}
		}
		return nil
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
