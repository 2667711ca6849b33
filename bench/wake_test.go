package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkAdvisoryWake measures what a PostgreSQL waiter's statement
// costs once its advisory lock is granted: two connections hand one lock
// back and forth, and each op is the time from the holder's
// pg_advisory_unlock call to the waiter's statement returning. The
// waiter's statement rotates, op by op, between
//
//	lock:   pg_advisory_lock alone (the pgx-advisory peer's wait)
//	commit: the lock and an xid, so the statement commits (nothing written)
//	update: the lock and a plain UPDATE of the key's counter row
//	bump:   the lock and the raw floor's token bump (raw-advisory's wait)
//
// and each reports its median, so the difference between them is what
// issuing a token costs a handoff:
//
//	go test -run '^$' -bench AdvisoryWake -benchtime 3000x
func BenchmarkAdvisoryWake(b *testing.B) {
	srv := sharedServers(b)
	if srv.PostgresDSN == "" {
		b.Skip("no PostgreSQL server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const key = "bench/go/wake"
	id := lockID(key)
	waits := []struct {
		name, sql string
		args      []any
	}{
		{"lock", "SELECT pg_advisory_lock($1)", []any{id}},
		{"commit", "SELECT pg_advisory_lock($1), txid_current()", []any{id}},
		{"update", `WITH lk AS (SELECT pg_advisory_lock($2))
			UPDATE raw_tokens SET token = token + 1 FROM lk WHERE key = $1`, []any{key, id}},
		{"bump", rawAdvisoryLock, []any{key, id}},
	}
	var conns [3]*pgx.Conn // two to hand the lock back and forth, one to watch
	for i := range conns {
		c, err := pgx.Connect(ctx, srv.PostgresDSN)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	holder, waiter, watch := conns[0], conns[1], conns[2]
	if _, err := watch.Exec(ctx, `INSERT INTO raw_tokens (key, token) VALUES ($1, 1)
		ON CONFLICT (key) DO NOTHING`, key); err != nil { // so that update finds its row
		b.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		b.Fatal(err)
	}
	lat := make([][]time.Duration, len(waits))
	i := 0
	for b.Loop() {
		w := waits[i%len(waits)]
		granted := make(chan error, 1)
		go func() {
			_, err := waiter.Exec(ctx, w.sql, w.args...)
			granted <- err
		}()
		// Release only once the waiter waits in the server, and a little
		// later, so that its statement is all the way in.
		for queued := false; !queued; {
			if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted)`).Scan(&queued); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		var ok bool
		if err := holder.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatalf("unlock: %v (released: %v)", err, ok)
		}
		if err := <-granted; err != nil {
			b.Fatalf("%s: %v", w.name, err)
		}
		lat[i%len(waits)] = append(lat[i%len(waits)], time.Since(start))
		holder, waiter = waiter, holder
		i++
	}
	for j, w := range waits {
		if len(lat[j]) > 0 {
			b.ReportMetric(float64(summarize(lat[j]).P50)/1e3, w.name+"-p50-µs")
		}
	}
}
