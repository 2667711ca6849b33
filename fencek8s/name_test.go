package fencek8s

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fencing/fence"
)

func TestName(t *testing.T) {
	keys := []string{
		"leader", "my-app.example.com", "Leader", "LEADER", "a/b", "a/b/", "a//b", ".", "..",
		"../../etc/passwd", "/abs", "{tag}", "with space", "ключ", "鍵🔒", "e\u0301", "\u00e9",
		"a--b", "a-b", "-a", "a-", "", strings.Repeat("x", 253), strings.Repeat("x", 254),
		strings.Repeat("Y", fence.MaxKeyLen),
	}
	seen := map[string]string{}
	for _, k := range keys {
		n := Name(k)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("Name(%.40q) = %q: not a Lease name: %v", k, n, errs)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("Name(%.40q) = Name(%.40q) = %q", k, other, n)
		}
		seen[n] = k
	}
	// Valid names are kept, so fence can share a client-go elector's Lease.
	for _, k := range []string{"leader", "my-app.example.com", "a-b", strings.Repeat("x", 253)} {
		if n := Name(k); n != k {
			t.Errorf("Name(%q) = %q; want the key itself", k, n)
		}
	}
	// A hashed name contains "--", a kept one never: the two cannot meet.
	if n := Name("Leader"); !strings.Contains(n, "--") {
		t.Errorf("Name(%q) = %q; want a hashed name", "Leader", n)
	}
	if n := Name(Name("Leader")); n == Name("Leader") {
		t.Errorf("a key equal to another key's hashed name maps to that name %q", n)
	}
}

// TestTake checks the token arithmetic of an acquisition: a new Lease is
// seeded with the time, a Lease without base (client-go's) is seeded so
// the token is the time, and a count near the 32-bit limit moves into
// base, the token growing by one each time.
func TestTake(t *testing.T) {
	d := &Store{}
	req := fence.Request{Key: "k", Owner: "o", TTL: time.Second}
	before := time.Now().UnixMicro()

	l := d.take(&coordinationv1.Lease{}, req, 1)
	if tok := token(l); tok < before || *l.Spec.LeaseTransitions != 0 {
		t.Errorf("new Lease: token %d, transitions %d; want the time (>= %d) and 0", tok, *l.Spec.LeaseTransitions, before)
	}

	clientGo := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr(int32(7))}}
	clientGo.ResourceVersion = "5"
	l = d.take(clientGo, req, 1)
	if tok := token(l); tok < before || *l.Spec.LeaseTransitions != 8 {
		t.Errorf("client-go's Lease: token %d, transitions %d; want the time (>= %d) and 8", tok, *l.Spec.LeaseTransitions, before)
	}
	prev := token(l)
	l = d.take(l, req, 1)
	if tok := token(l); tok != prev+1 {
		t.Errorf("next acquisition: token %d; want %d", tok, prev+1)
	}

	l.Spec.LeaseTransitions = ptr(int32(maxTransitions))
	prev = token(l)
	l = d.take(l, req, 1)
	if tok := token(l); tok != prev+1 || *l.Spec.LeaseTransitions != 1 {
		t.Errorf("at the limit: token %d, transitions %d; want %d and 1", tok, *l.Spec.LeaseTransitions, prev+1)
	}
}
