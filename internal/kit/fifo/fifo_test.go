package fifo

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// queue is a fake store: names in order; the waiter is "me".
type queue struct {
	entries   []string
	awaited   []string
	confirmed int
	// leave is called by AwaitGone: it changes the queue as the store
	// would while the waiter watches.
	leave func(q *queue, e string)
}

func (q *queue) Ahead(context.Context) (string, bool, error) {
	i := slices.Index(q.entries, "me")
	if i < 0 {
		return "", false, errGone
	}
	if i == 0 {
		return "", false, nil
	}
	return q.entries[i-1], true, nil
}

func (q *queue) AwaitGone(ctx context.Context, e string) error {
	q.awaited = append(q.awaited, e)
	if q.leave == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	q.leave(q, e)
	return nil
}

func (q *queue) Confirm(context.Context) error { q.confirmed++; return nil }

var errGone = errors.New("my entry is gone")

func drop(q *queue, e string) {
	q.entries = slices.DeleteFunc(q.entries, func(x string) bool { return x == e })
}

func TestWaitsForEachPredecessorInTurn(t *testing.T) {
	q := &queue{entries: []string{"a", "b", "c", "me", "d"}, leave: drop}
	if err := WaitTurn(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(q.awaited, want) || q.confirmed != 1 {
		t.Errorf("watched %v, confirmed %d times; want %v, once", q.awaited, q.confirmed, want)
	}
}

// A watch that breaks (AwaitGone returns with the entry still there)
// makes the waiter look again, not take its turn.
func TestBrokenWatchLooksAgain(t *testing.T) {
	breaks := 2
	q := &queue{entries: []string{"a", "me"}, leave: func(q *queue, e string) {
		if breaks--; breaks < 0 {
			drop(q, e)
		}
	}}
	if err := WaitTurn(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if len(q.awaited) != 3 || q.confirmed != 1 {
		t.Errorf("watched %v, confirmed %d times; want a three times, once", q.awaited, q.confirmed)
	}
}

func TestOwnEntryGoneFails(t *testing.T) {
	q := &queue{entries: []string{"a", "me"}, leave: func(q *queue, e string) { drop(q, "me") }}
	if err := WaitTurn(context.Background(), q); !errors.Is(err, errGone) || q.confirmed != 0 {
		t.Errorf("WaitTurn = %v, confirmed %d; want errGone, unconfirmed", err, q.confirmed)
	}
}

func TestCancelledWaitGivesUp(t *testing.T) {
	q := &queue{entries: []string{"a", "me"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := WaitTurn(ctx, q); !errors.Is(err, context.DeadlineExceeded) || q.confirmed != 0 {
		t.Errorf("WaitTurn = %v, confirmed %d; want the context's error", err, q.confirmed)
	}
	q = &queue{entries: []string{"me"}}
	if err := WaitTurn(ctx, q); err == nil || q.confirmed != 0 {
		t.Errorf("WaitTurn on an ended context = %v, confirmed %d; want an error", err, q.confirmed)
	}
}
