package fence

// MaxBatch is maxBatch, for the tests of renewal in batches.
const MaxBatch = maxBatch

// StopTimers takes the lease's deadlines off its Client's schedule, as if
// their timers had not run yet: a process that has just resumed from a
// pause longer than the validity.
func (l *Lease) StopTimers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.sched.dropLease(l)
}

// Deadlines returns how many deadlines the Client's schedule holds, and
// how many of them are cohorts'.
func (c *Client) Deadlines() (n, cohorts int) {
	s := &c.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range []eventQueue{s.queue, s.batch} {
		for _, e := range q {
			n++
			if e.cohort != nil {
				cohorts++
			}
		}
	}
	return n, cohorts
}
