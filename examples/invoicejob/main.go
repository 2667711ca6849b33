// Command invoicejob is the nightly invoice job, run on every instance of a
// service but done by one at a time.
//
// Each instance takes the lock on the job's key in Redis with a 60 s
// expiry, set only if absent; fence renews it every 20 s and releases it
// with a compare-and-delete. An instance that finds the lock held logs that
// it skipped the run. The holder writes one invoice per customer to
// PostgreSQL, each in a transaction that first shows the lease's fencing
// token to a guard: the database refuses a token older than the last one
// written for the job. So an instance that was paused past its lease (a GC
// pause, a frozen VM) and wakes up mid-batch cannot write an invoice the
// instance that took over has already written.
//
//	invoicejob --redis redis://localhost:6379 --pg postgres://localhost/app --period 2026-11
//
// Exit status: 0 when the run is done, 3 when another instance was running
// it (skipped), 4 when this instance lost the job mid-batch (its late
// writes were refused, or it noticed the lease was gone), 1 on errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/fenceredis"
)

const (
	exitDone    = 0
	exitError   = 1
	exitSkipped = 3
	exitLost    = 4
)

type config struct {
	redisURL, pgURL, period, instance string
	customers                         int
	ttl, renew, step                  time.Duration
	verbose                           bool
}

func main() {
	var c config
	host, _ := os.Hostname()
	flag.StringVar(&c.redisURL, "redis", "redis://localhost:6379", "Redis URL: the lock store")
	flag.StringVar(&c.pgURL, "pg", "postgres://localhost/app", "PostgreSQL URL: the invoices store")
	flag.StringVar(&c.period, "period", time.Now().AddDate(0, -1, 0).Format("2006-01"), "the billing period to invoice")
	flag.StringVar(&c.instance, "instance", fmt.Sprintf("%s-%d", host, os.Getpid()), "this instance's name, for logs and the invoices it writes")
	flag.IntVar(&c.customers, "customers", 20, "customers to invoice (a stand-in for the customer table)")
	flag.DurationVar(&c.ttl, "ttl", 60*time.Second, "lock expiry")
	flag.DurationVar(&c.renew, "renew", 20*time.Second, "how often the lock is renewed")
	flag.DurationVar(&c.step, "step", 200*time.Millisecond, "time to prepare one invoice (a stand-in for the real work)")
	flag.BoolVar(&c.verbose, "v", false, "also log each invoice as its preparation starts")
	flag.Parse()

	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("instance", c.instance)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, c, log))
}

func run(ctx context.Context, c config, log *slog.Logger) int {
	// The lock store: Redis, through fence's Redis driver.
	ropts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		log.Error("bad --redis", "err", err)
		return exitError
	}
	ropts.ContextTimeoutEnabled = true // renewals give up when the lease's validity ends
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	store, err := fenceredis.New(rdb)
	if err != nil {
		log.Error("redis lock store", "err", err)
		return exitError
	}
	defer store.Close()
	locks := fence.New(store,
		fence.WithTTL(c.ttl),
		fence.WithRenewInterval(c.renew),
		fence.WithOwner(c.instance),
		fence.WithLogger(log))

	// The invoices store: PostgreSQL, with fence's guard table beside it.
	db, err := pgxpool.New(ctx, c.pgURL)
	if err != nil {
		log.Error("postgres", "err", err)
		return exitError
	}
	defer db.Close()
	guard, err := setup(ctx, db)
	if err != nil {
		log.Error("postgres setup", "err", err)
		return exitError
	}

	job := &invoiceJob{cfg: c, db: db, guard: guard, log: log}
	key := "invoice-job/" + c.period
	err = locks.Run(ctx, key, job.run, fence.SkipIfHeld())
	switch {
	case err == nil:
		log.Info("invoice run done", "period", c.period)
		return exitDone
	case errors.Is(err, fence.ErrSkipped):
		log.Info("skipped: another instance is running the invoice job", "period", c.period, "held", err)
		return exitSkipped
	case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrLost):
		log.Warn("lost the invoice job to another instance; stopped", "period", c.period, "err", err)
		return exitLost
	}
	log.Error("invoice run failed", "period", c.period, "err", err)
	return exitError
}

type invoiceJob struct {
	cfg   config
	db    *pgxpool.Pool
	guard *fencepg.Guard
	log   *slog.Logger
}

// run is the job, under the lease: invoice every customer that has no
// invoice for the period yet (a run picks up where a lost one stopped).
func (j *invoiceJob) run(ctx context.Context, lease *fence.Lease) error {
	j.log.Info("took the invoice job", "period", j.cfg.period, "token", lease.Token())
	todo, err := j.uninvoiced(ctx)
	if err != nil {
		return err
	}
	for _, customer := range todo {
		if err := lease.Err(); err != nil {
			return err // we know the lease is gone: stop
		}
		j.log.Debug("preparing invoice", "customer", customer, "token", lease.Token())
		amount := j.prepare(customer) // slow; a pause may land here
		// The write does not use ctx, which ends with the lease: a process
		// that wakes from a pause finds this write and its lease's timer
		// both due, and either may run first. The token, checked in the
		// write's own transaction, is what decides.
		if err := j.write(context.WithoutCancel(ctx), lease.Token(), customer, amount); err != nil {
			if errors.Is(err, fence.ErrStale) {
				j.log.Warn("invoice refused: a newer run of the job has written", "customer", customer, "token", lease.Token(), "err", err)
			}
			return err
		}
		j.log.Info("wrote invoice", "customer", customer, "amount_cents", amount, "token", lease.Token())
	}
	return nil
}

// prepare stands in for computing a customer's invoice.
func (j *invoiceJob) prepare(customer string) int64 {
	time.Sleep(j.cfg.step)
	var sum int64
	for _, c := range customer {
		sum = sum*31 + int64(c)
	}
	return 1000 + sum%9000
}

// write records one invoice, in a transaction that first admits the
// lease's token: the guard refuses a token older than the last one written
// for this job and keeps its row locked until commit, so the check and the
// insert commit together.
func (j *invoiceJob) write(ctx context.Context, token int64, customer string, amount int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, j.db, func(tx pgx.Tx) error {
		if err := j.guard.Admit(ctx, tx, "invoice-job/"+j.cfg.period, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoices (period, customer, amount_cents, token, instance) VALUES ($1, $2, $3, $4, $5)`,
			j.cfg.period, customer, amount, token, j.cfg.instance)
		return err
	})
}

func (j *invoiceJob) uninvoiced(ctx context.Context) ([]string, error) {
	rows, err := j.db.Query(ctx, `SELECT customer FROM invoices WHERE period = $1`, j.cfg.period)
	if err != nil {
		return nil, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, c := range done {
		seen[c] = true
	}
	var todo []string
	for i := 1; i <= j.cfg.customers; i++ {
		if c := fmt.Sprintf("customer-%03d", i); !seen[c] {
			todo = append(todo, c)
		}
	}
	return todo, nil
}

// setup creates the invoices table and fence's guard table if missing.
// There is deliberately no unique constraint on (period, customer): the
// fencing token alone keeps a customer from being invoiced twice.
func setup(ctx context.Context, db *pgxpool.Pool) (*fencepg.Guard, error) {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Instances start together: serialize CREATE TABLE IF NOT EXISTS,
		// which fails when two sessions race to create the same table.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, fencepg.AdvisoryID("invoicejob setup")); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (
			id           bigserial PRIMARY KEY,
			period       text   NOT NULL,
			customer     text   NOT NULL,
			amount_cents bigint NOT NULL,
			token        bigint NOT NULL,
			instance     text   NOT NULL,
			written_at   timestamptz NOT NULL DEFAULT now()
		)`)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := fencepg.Setup(ctx, db); err != nil {
		return nil, err
	}
	return fencepg.NewGuard()
}
