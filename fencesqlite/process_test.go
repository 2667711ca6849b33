//go:build linux

package fencesqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

// The test binary, started with childDBEnv set to a database path, acts as
// a child process in the role childRoleEnv names (see childMain).
const (
	childDBEnv   = "FENCESQLITE_TEST_DB"
	childRoleEnv = "FENCESQLITE_TEST_ROLE"
	childFileEnv = "FENCESQLITE_TEST_FILE"
	childRounds  = 25
)

func childMain(path, role string) int {
	if role == "opener" {
		// Start together: wait for the parent's go, then race to create.
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	s, err := fencesqlite.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch role {
	case "holder":
		err = pausedHolder(ctx, s)
	case "counter":
		err = counter(ctx, s, os.Getenv(childFileEnv))
	case "writer":
		// Holds the write lock, as a process stopped or dead in the
		// middle of a transaction would, until it is killed.
		var tx *sql.Tx
		if tx, err = s.DB().BeginTx(ctx, nil); err == nil {
			defer tx.Rollback()
			fmt.Println("locked")
			time.Sleep(time.Minute)
		}
	case "opener":
		// Opened (above) at the same moment as the other openers, on a
		// file none of them had: take a key once.
		var l *fence.Lease
		if l, err = fence.New(s).Acquire(ctx, "first", fence.WithWait(time.Minute)); err == nil {
			err = l.Release(ctx)
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// pausedHolder takes "invoice" for a second, with no renewal (so that no
// transaction of its own is open when it is stopped), says its token,
// waits for a line on stdin and then writes to the guarded row with its
// token, as a holder that resumes from a pause would, whatever its lease.
func pausedHolder(ctx context.Context, s *fencesqlite.Store) error {
	c := fence.New(s, fence.WithTTL(time.Second), fence.WithoutRenewal())
	defer c.Close(ctx)
	l, err := c.TryAcquire(ctx, "invoice")
	if err != nil {
		return err
	}
	fmt.Printf("token %d\n", l.Token())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	ok, err := guardedWrite(ctx, s, "A", l.Token())
	if err != nil {
		return err
	}
	if ok {
		fmt.Println("accepted")
	} else {
		fmt.Println("refused")
	}
	return nil
}

// guardedWrite is the resource side: the row remembers the highest token
// that wrote it and refuses a lower one, in the write itself.
func guardedWrite(ctx context.Context, s *fencesqlite.Store, body string, token int64) (bool, error) {
	res, err := s.DB().ExecContext(ctx, `UPDATE doc SET body = ?1, fence = ?2 WHERE id = 1 AND fence <= ?2`, body, token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// counter adds one to the number in file childRounds times, each time
// under the lease of "counter", by an unsynchronized read, pause and
// write: two holders at once would lose an increment.
func counter(ctx context.Context, s *fencesqlite.Store, file string) error {
	c := fence.New(s, fence.WithTTL(5*time.Second))
	defer c.Close(ctx)
	for range childRounds {
		l, err := c.Acquire(ctx, "counter", fence.WithWait(time.Minute))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
		if err := os.WriteFile(file, []byte(strconv.Itoa(n+1)), 0o600); err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

func child(t *testing.T, path, role string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, childDBEnv+"="+path, childRoleEnv+"="+role)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, in, bufio.NewReader(out)
}

// TestPausedHolderRefusedByGuard is the classic scenario across two
// processes on one database file: holder A is stopped (SIGSTOP) past its
// lease's TTL, B takes the key with a greater token and writes; A resumes
// and writes with its old token, and the guard refuses it.
func TestPausedHolderRefusedByGuard(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := open(t, path)
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE doc (id INTEGER PRIMARY KEY, body TEXT NOT NULL, fence INTEGER NOT NULL);
		INSERT INTO doc VALUES (1, '', 0)`); err != nil {
		t.Fatal(err)
	}
	a, aIn, aOut := child(t, path, "holder")
	line, err := aOut.ReadString('\n')
	if err != nil {
		t.Fatalf("holder A: %v", err)
	}
	var tokA int64
	if _, err := fmt.Sscanf(line, "token %d", &tokA); err != nil {
		t.Fatalf("holder A said %q", line)
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := fence.New(s, fence.WithTTL(time.Second))
	defer c.Close(ctx)
	if _, err := c.TryAcquire(ctx, "invoice"); err == nil {
		t.Fatal("B took the key while A's lease was still valid")
	}
	time.Sleep(1500 * time.Millisecond) // A's lease expires in the store
	l, err := c.TryAcquire(ctx, "invoice")
	if err != nil {
		t.Fatalf("B after A's lease expired: %v", err)
	}
	if l.Token() <= tokA {
		t.Fatalf("B's token %d, A's %d", l.Token(), tokA)
	}
	if ok, err := guardedWrite(ctx, s, "B", l.Token()); err != nil || !ok {
		t.Fatalf("B's write: %v, %v", ok, err)
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(aIn, "write\n"); err != nil {
		t.Fatal(err)
	}
	line, err = aOut.ReadString('\n')
	if err != nil {
		t.Fatalf("holder A after resuming: %v", err)
	}
	if strings.TrimSpace(line) != "refused" {
		t.Errorf("A's write with token %d after B's %d: %q; want refused", tokA, l.Token(), line)
	}
	var body string
	var fenceTok int64
	if err := s.DB().QueryRowContext(ctx, `SELECT body, fence FROM doc WHERE id = 1`).Scan(&body, &fenceTok); err != nil {
		t.Fatal(err)
	}
	if body != "B" || fenceTok != l.Token() {
		t.Errorf("doc = %q with token %d; want B's write, token %d", body, fenceTok, l.Token())
	}
	_ = l.Release(ctx)
}

// TestMutualExclusionAcrossProcesses: several processes increment a
// number in a plain file under the lease, by read, pause and write; no
// increment may be lost.
func TestMutualExclusionAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.db")
	open(t, path) // the table exists before the children race to create it
	file := filepath.Join(dir, "count")
	if err := os.WriteFile(file, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	const procs = 4
	var cmds []*exec.Cmd
	for range procs {
		cmd, in, _ := child(t, path, "counter", childFileEnv+"="+file)
		in.Close()
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("counter process %d: %v", i, err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), strconv.Itoa(procs*childRounds); got != want {
		t.Errorf("count %s after %d processes of %d rounds; want %s (an increment was lost: two holders at once)",
			got, procs, childRounds, want)
	}
}

// TestFirstOpenRace: several processes open a database file that does not
// exist yet at the same moment; each creates or finds the table, in WAL
// mode, and takes the key.
func TestFirstOpenRace(t *testing.T) {
	for round := range 3 {
		path := filepath.Join(t.TempDir(), "fence.db")
		var cmds []*exec.Cmd
		var ins []io.WriteCloser
		for range 6 {
			cmd, in, _ := child(t, path, "opener")
			cmds, ins = append(cmds, cmd), append(ins, in)
		}
		time.Sleep(300 * time.Millisecond) // the children are up, waiting
		for _, in := range ins {
			_, _ = io.WriteString(in, "go\n")
			in.Close()
		}
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("round %d: opener %d: %v", round, i, err)
			}
		}
	}
}

// TestDeadWriterFreesTheFile: a process that holds the write lock blocks
// every other writer (their operations fail after the busy timeout, not
// with ErrHeld); once it is killed, the kernel drops its locks and SQLite
// rolls its transaction back, and the others go on at once.
func TestDeadWriterFreesTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := open(t, path, fencesqlite.WithBusyTimeout(200*time.Millisecond))
	w, _, out := child(t, path, "writer")
	if line, err := out.ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("writer: %q, %v", line, err)
	}
	_, err := s.TryAcquire(ctx, req("k", "o", time.Minute))
	if err == nil || errors.Is(err, fence.ErrHeld) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("TryAcquire while another process holds the write lock: %v; want database is locked", err)
	}
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	c, err := s.TryAcquire(ctx, req("k", "o", time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire once the writer was killed: %v", err)
	}
	_ = c.Release(ctx)
}
