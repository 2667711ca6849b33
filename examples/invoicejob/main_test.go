package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// The test runs instances of the job as separate processes: this test
// binary, re-executed with runEnv set, runs main.
const runEnv = "INVOICEJOB_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// instance is one running job process.
type instance struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   strings.Builder
	wrote chan struct{} // a value per "wrote invoice" line
	// preparing gets the customer of every "preparing invoice" line
	// (logged with -v, once the lease was found valid)
	preparing chan string
	done      chan struct{}
	code      int
}

func start(t *testing.T, name string, args ...string) *instance {
	t.Helper()
	in := &instance{name: name, wrote: make(chan struct{}, 100), preparing: make(chan string, 100), done: make(chan struct{})}
	in.cmd = exec.Command(os.Args[0], append([]string{"--instance", name}, args...)...)
	in.cmd.Env = append(os.Environ(), runEnv+"=1")
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := in.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			in.mu.Lock()
			in.log.WriteString(line + "\n")
			in.mu.Unlock()
			if strings.Contains(line, "wrote invoice") {
				in.wrote <- struct{}{}
			}
			if _, rest, ok := strings.Cut(line, `msg="preparing invoice"`); ok {
				_, customer, _ := strings.Cut(rest, "customer=")
				customer, _, _ = strings.Cut(customer, " ")
				in.preparing <- customer
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		err := in.cmd.Wait()
		in.code = in.cmd.ProcessState.ExitCode()
		if err != nil && in.code < 0 {
			in.code = 128 + int(in.cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
		}
		close(in.done)
	}()
	t.Cleanup(func() {
		_ = in.cmd.Process.Signal(syscall.SIGCONT)
		_ = in.cmd.Process.Kill()
		<-in.done
		if t.Failed() {
			t.Logf("instance %s log:\n%s", in.name, in.output())
		}
	})
	return in
}

func (in *instance) output() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.log.String()
}

func (in *instance) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-in.done:
		return in.code
	case <-time.After(d):
		t.Fatalf("instance %s still running after %v", in.name, d)
		return -1
	}
}

// TestPausedHolderCannotInvoiceTwice: three instances of the job against
// real Redis and PostgreSQL. A takes the job; B finds it held and skips. A
// is stopped (SIGSTOP) mid-batch past its lease's TTL; C then takes the job
// over and finishes it; A resumes, and its late write is refused. Every
// customer ends with exactly one invoice.
func TestPausedHolderCannotInvoiceTwice(t *testing.T) {
	rs := testserver.Redis(t)
	pg := testserver.Postgres(t)
	const (
		customers = 12
		ttl       = time.Second
	)
	args := []string{"--redis", rs.URL(), "--pg", pg.DSN(), "--period", "2026-10",
		"--customers", fmt.Sprint(customers), "--ttl", ttl.String(), "--renew", "300ms", "--step", "150ms", "-v"}

	a := start(t, "A", args...)
	// A is mid-batch once it wrote a few invoices: stop it after its third,
	// once it found its lease valid and began preparing the fourth (no
	// transaction open), so that on resuming it goes straight to the
	// write the guard must refuse. (Stopped before that check, it may
	// find the lease gone on resuming and never write at all.)
	for i := range 3 {
		select {
		case <-a.wrote:
		case <-a.done:
			t.Fatalf("A exited (%d) after %d invoices", a.code, i)
		case <-time.After(30 * time.Second):
			t.Fatalf("A wrote %d invoices in 30s", i)
		}
		if i == 0 {
			// B starts while A holds the job: it must skip.
			b := start(t, "B", args...)
			if code := b.wait(t, 30*time.Second); code != exitSkipped || !strings.Contains(b.output(), "skipped") {
				t.Fatalf("B: exit %d, want %d (skipped); log:\n%s", code, exitSkipped, b.output())
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The stop must land in a step (--step) of preparing, which a loaded
	// machine can miss: stopped inside its guarded write, A would hold
	// the guard's row lock, and C's guard would wait for it until A
	// resumes. PostgreSQL tells: a stopped client's open transaction is
	// "idle in transaction". Then A goes on, to be stopped at its next
	// invoice.
	for try := 0; ; try++ {
		for customer := ""; customer == "" || (try == 0 && customer != "customer-004"); {
			select {
			case customer = <-a.preparing:
			case <-a.done:
				t.Fatalf("A exited (%d) before it was stopped mid-batch", a.code)
			case <-time.After(30 * time.Second):
				t.Fatal("A began no invoice in 30s")
			}
		}
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var busy int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND backend_type = 'client backend' AND state LIKE 'idle in transaction%'`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if try == 4 {
			t.Fatalf("A was stopped inside a transaction %d times", try+1)
		}
		t.Logf("A stopped inside a transaction (%d sessions not idle); resuming it", busy)
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("A stopped mid-batch")
	time.Sleep(ttl + ttl/2) // A's lease expires in Redis

	c := start(t, "C", args...)
	if code := c.wait(t, 60*time.Second); code != exitDone {
		t.Fatalf("C: exit %d, want %d (done)", code, exitDone)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 30*time.Second); code != exitLost {
		t.Fatalf("A after resuming: exit %d, want %d (lost the job)", code, exitLost)
	}
	if !strings.Contains(a.output(), "invoice refused") {
		t.Errorf("A's late write was not refused by the guard; log:\n%s", a.output())
	}

	// Every customer invoiced exactly once; A's invoices carry the older
	// token.
	rows, err := db.Query(ctx, `SELECT customer, count(*), min(instance), min(token), max(token) FROM invoices WHERE period = '2026-10' GROUP BY customer ORDER BY customer`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	tokens := map[string]int64{}
	for rows.Next() {
		var (
			customer, inst string
			n              int
			lo, hi         int64
		)
		if err := rows.Scan(&customer, &n, &inst, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		seen++
		if n != 1 {
			t.Errorf("%s invoiced %d times", customer, n)
		}
		if old, ok := tokens[inst]; ok && old != lo {
			t.Errorf("instance %s wrote with tokens %d and %d", inst, old, lo)
		}
		tokens[inst] = lo
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != customers {
		t.Errorf("%d of %d customers invoiced", seen, customers)
	}
	if tokens["A"] == 0 || tokens["C"] <= tokens["A"] || len(tokens) != 2 {
		t.Errorf("tokens by instance: %v; want A's and a greater one of C's only", tokens)
	}
}
