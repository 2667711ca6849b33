package fenceaztable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
)

func TestEntityRoundTrip(t *testing.T) {
	e := entity{key: "jobs/nightly", token: 1<<62 + 7, owner: "o1", ttl: 2500 * time.Millisecond,
		meta: map[string]string{"host": "h", "pid": "7"}, write: "w1"}
	b, err := e.marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseEntity(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.key != e.key || got.token != e.token || got.owner != e.owner || got.ttl != e.ttl || got.meta["pid"] != "7" || got.write != "w1" {
		t.Errorf("round trip: %+v, want %+v", got, e)
	}
	// Int64 properties as numbers, as another writer may send them.
	got, err = parseEntity([]byte(`{"Key":"k","Token":42,"TTLms":1000,"Owner":"x"}`))
	if err != nil || got.token != 42 || got.ttl != time.Second {
		t.Errorf("numbers: %+v, %v", got, err)
	}
	// A lost or foreign counter reads as none; a held entity without a
	// TTL is held for the fallback.
	got, err = parseEntity([]byte(`{"Key":"k","Token":"nope","Owner":"x"}`))
	if err != nil || got.token != 0 || got.holdFor(time.Minute) != time.Minute || !got.held() {
		t.Errorf("foreign entity: %+v, %v", got, err)
	}
	big := entity{key: "k", owner: "o", ttl: time.Second, meta: map[string]string{"x": strings.Repeat("y", maxMeta)}}
	if _, err := big.marshal(); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("oversized metadata: %v; want ErrInvalidOption", err)
	}
	if ttlMillis(1500*time.Microsecond) != 2*time.Millisecond {
		t.Errorf("ttlMillis rounds down")
	}
}

func TestNextToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		counter int64
		now     *time.Time
		want    int64
	}{
		{0, nil, 1},
		{5, nil, 6},
		{0, &now, 1_800_000_000_000_000},
		{5, &now, 1_800_000_000_000_000},
		{1_800_000_000_000_009, &now, 1_800_000_000_000_010},
	} {
		if got, err := nextToken(c.counter, c.now); err != nil || got != c.want {
			t.Errorf("nextToken(%d, %v) = %d, %v; want %d", c.counter, c.now, got, err, c.want)
		}
	}
	if _, err := nextToken(1<<63-1, nil); err == nil {
		t.Error("nextToken of an exhausted counter: no error")
	}
}
