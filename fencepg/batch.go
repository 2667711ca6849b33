package fencepg

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencing/fence"
)

var _ fence.BatchExtender = (*LeaseStore)(nil)

// Batchable implements fence.BatchExtender: the LeaseStore extends its
// locks' claims in batches, with or without a lock-delay. Semaphore
// slots, in another table, are extended one by one.
func (d *LeaseStore) Batchable(c fence.Claim) bool {
	lc, ok := c.(*leaseClaim)
	return ok && lc.d == d
}

// ExtendBatch implements fence.BatchExtender in one round trip: one
// UPDATE joined with the claims, sent as arrays (unnest), which extends
// each claim's row on the conditions of its Extend (key, owner, and
// extendable: not past its expiry, so not in its lock-delay) and returns
// the positions of the claims it extended, in one array (one row to
// read, not one per claim); the others are refused.
//
// One statement rather than a pipeline of the claims' own Extend
// statements (a pgx.Batch, one round trip too): the server plans, starts
// and answers one statement instead of one per claim. For 1,000 claims it
// spent about a third of the pipeline's CPU time (BenchmarkExtendBatch;
// docs/postgres.md, "Renewal in batches"). No two batches want one row
// (a row matches one owner only); a TryAcquireAll taking over an expired
// lease's row can want rows of a batch, hence the order below.
//
// A claim is distinct from every other (the Client never batches one
// twice), and its key and owner pair is too, owners being unique to an
// acquisition, so each row joins one claim at most.
func (d *LeaseStore) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	errs := make([]error, len(claims))
	at := make([]int, 0, len(claims)) // at[j]: the claim sent j-th
	cs := make([]*leaseClaim, len(claims))
	for i, c := range claims {
		lc, ok := c.(*leaseClaim)
		if !ok || lc.d != d {
			errs[i] = fmt.Errorf("fencepg: ExtendBatch of a claim of another driver (%T)", c)
			continue
		}
		cs[i] = lc
		at = append(at, i)
	}
	if len(at) == 0 {
		return errs
	}
	// Sent in the order of their keys, as TryAcquireAll sends its keys:
	// the plans the server picks for this join (the claims as the outer
	// side of a nested loop or hash join) lock the rows in the order
	// sent, so a batch and a TryAcquireAll wait for each other's rows in
	// one order, not in a cycle.
	slices.SortFunc(at, func(i, j int) int { return strings.Compare(cs[i].key, cs[j].key) })
	keys := textArray(len(at), func(j int) string { return cs[at[j]].key })
	owners := textArray(len(at), func(j int) string { return cs[at[j]].owner })
	ttlUS := intArray(len(at), func(j int) int64 { return micros(ttls[at[j]]) })
	extended := make([]bool, len(claims))
	var done []int64 // 1-based, from WITH ORDINALITY; NULL (nil) if none
	err := d.pool.QueryRow(ctx, d.qExtendBatch, keys, owners, ttlUS).Scan(&done)
	if err == nil {
		for _, j := range done {
			if j < 1 || j > int64(len(at)) {
				err = fmt.Errorf("extended claim %d of %d", j, len(at))
				break
			}
			extended[at[j-1]] = true
		}
	}
	for _, i := range at {
		c := cs[i]
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("fencepg: extend %q: %w", c.key, err)
		case !extended[i]:
			errs[i] = c.notHeld()
		}
	}
	return errs
}

// textArray is the PostgreSQL array literal ({"a","b"}) of n strings,
// val(0) to val(n-1), each quoted, with its backslashes and double quotes
// escaped. Given as a parameter, pgx sends a string in text format
// whatever its type, and the server parses it as the text[] the statement
// declares: one string for the array, where pgx's own encoding of a
// []string puts every element in an interface of its own.
func textArray(n int, val func(int) string) string {
	size := 2
	for i := range n {
		size += len(val(i)) + 3
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		v := val(i)
		for v != "" {
			k := strings.IndexAny(v, `"\`)
			if k < 0 {
				b.WriteString(v)
				break
			}
			b.WriteString(v[:k])
			b.WriteByte('\\')
			b.WriteByte(v[k])
			v = v[k+1:]
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// intArray is the array literal ({1,2}) of n integers, as textArray.
func intArray(n int, val func(int) int64) string {
	b := make([]byte, 0, 2+12*n)
	b = append(b, '{')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, val(i), 10)
	}
	return string(append(b, '}'))
}
