package torture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// agedFake is a store for wipeAged whose records are granted again as
// grant says at each listing, with tokens as the stores that seed them
// from the clock issue them, and which notes every record deleted in the
// second its token was issued.
type agedFake struct {
	grant    func(listing int) []string // the ids granted before this listing
	listing  int
	recs     map[string]int64
	issued   map[string]int64 // id -> the second its token was issued
	violated []string
	deleted  int
}

func newAgedFake(grant func(int) []string) *agedFake {
	return &agedFake{grant: grant, recs: map[string]int64{}, issued: map[string]int64{}}
}

func (f *agedFake) store() agedStore {
	return agedStore{
		what: "records",
		list: func(context.Context) ([]agedRecord, error) {
			for _, id := range f.grant(f.listing) {
				now := time.Now().Unix()
				f.recs[id] = max(f.recs[id]+1, now*1_000_000)
				f.issued[id] = now
			}
			f.listing++
			var out []agedRecord
			for id, tok := range f.recs {
				out = append(out, agedRecord{id: id, token: tok})
			}
			return out, nil
		},
		remove: func(_ context.Context, r agedRecord) (bool, error) {
			if f.recs[r.id] != r.token {
				return false, nil
			}
			if f.issued[r.id] >= time.Now().Unix() {
				f.violated = append(f.violated, fmt.Sprintf("%s token %d, issued in second %d, deleted in it", r.id, r.token, f.issued[r.id]))
			}
			delete(f.recs, r.id)
			f.deleted++
			return true, nil
		},
	}
}

// TestWipeAgedWaitsOutTheSecond: the wipe of the stores that seed tokens
// at a second's resolution deletes a record only after the second its
// token was issued in, also when keys are granted again while the wipe
// runs, leaves keys first granted after it began, and fails loudly when a
// record is granted again within every second. The last case deletes at
// once, as a careless wipe would, and shows that the fake can tell.
func TestWipeAgedWaitsOutTheSecond(t *testing.T) {
	busy := func(i int) []string {
		switch i {
		case 0:
			return []string{"a", "b"}
		case 1:
			return []string{"b", "c"} // b again, c new
		}
		return nil
	}
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(300 * time.Millisecond) // into a second
		f := newAgedFake(busy)
		desc, err := wipeAged(f.store())(context.Background())
		if err != nil {
			t.Fatalf("wipe: %v", err)
		}
		if f.deleted != 2 || len(f.recs) != 1 || f.recs["c"] == 0 || len(f.violated) != 0 {
			t.Errorf("deleted %d, left %v, violations %q; want a and b deleted, c left, none in the second of its token", f.deleted, f.recs, f.violated)
		}
		t.Log(desc)
	})
	synctest.Test(t, func(t *testing.T) {
		f := newAgedFake(func(int) []string { return []string{"a"} })
		_, err := wipeAged(f.store())(context.Background())
		if err == nil || !strings.Contains(err.Error(), "granted again within every second") {
			t.Errorf("a record granted again every second: wipe error %v; want one saying so", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		f := newAgedFake(func(int) []string { return nil })
		if _, err := wipeAged(f.store())(context.Background()); err == nil || !strings.Contains(err.Error(), "no records") {
			t.Errorf("nothing to wipe: %v; want an error saying so", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		f := newAgedFake(busy)
		st := f.store()
		recs, _ := st.list(context.Background())
		time.Sleep(100 * time.Millisecond)
		for _, r := range recs {
			_, _ = st.remove(context.Background(), r)
		}
		if len(f.violated) == 0 {
			t.Error("deleting in the second a token was issued went unnoticed")
		}
	})
}
