package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceazblob"
	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/fencedynamo"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/fencefile"
	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fencemysql"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/fenceredis"
	"github.com/fencing/fence/fencesqlite"
	"github.com/fencing/fence/fencezk"
)

// docStores maps the columns of docs/primitives.md's "Features by store"
// table to the driver types they describe.
var docStores = map[string]reflect.Type{
	"mem":           reflect.TypeFor[*fencemem.Store](),
	"file":          reflect.TypeFor[*fencefile.Store](),
	"sqlite":        reflect.TypeFor[*fencesqlite.Store](),
	"redis Store":   reflect.TypeFor[*fenceredis.Store](),
	"redis Redlock": reflect.TypeFor[*fenceredis.Redlock](),
	"pg lease":      reflect.TypeFor[*fencepg.LeaseStore](),
	"pg session":    reflect.TypeFor[*fencepg.SessionStore](),
	"mysql":         reflect.TypeFor[*fencemysql.Store](),
	"etcd":          reflect.TypeFor[*fenceetcd.Store](),
	"zk":            reflect.TypeFor[*fencezk.Store](),
	"nats":          reflect.TypeFor[*fencenats.Store](),
	"azblob":        reflect.TypeFor[*fenceazblob.Store](),
	"aztable":       reflect.TypeFor[*fenceaztable.Store](),
	"dynamodb":      reflect.TypeFor[*fencedynamo.Store](),
	"k8s":           reflect.TypeFor[*fencek8s.Store](),
}

// docFeatures maps the table's rows (by their first words) to the
// optional interface a store has when the row says it does it in one
// atomic step, and whether a store without it is "emulated" (the Client
// does it over single-key operations) or "unsupported".
var docFeatures = []struct {
	row      string
	iface    reflect.Type
	fallback string
}{
	{"several keys", reflect.TypeFor[fence.MultiAcquirer](), "emulated"},
	{"lock-delay", reflect.TypeFor[fence.LockDelayer](), "unsupported"},
	{"break", reflect.TypeFor[fence.Breaker](), "unsupported"},
	{"resume", reflect.TypeFor[fence.Resumer](), "unsupported"},
}

// TestFeatureTableMatchesDrivers: docs/primitives.md's feature × store
// table says "atomic" exactly where the driver type implements the
// feature's interface, and the fallback elsewhere.
func TestFeatureTableMatchesDrivers(t *testing.T) {
	b, err := os.ReadFile("../../docs/primitives.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "| feature |")
	if i < 0 {
		t.Fatal(`docs/primitives.md: no table with a "| feature |" header`)
	}
	lines := strings.Split(text[i:], "\n")
	cells := func(line string) []string {
		parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for j := range parts {
			parts[j] = strings.TrimSpace(parts[j])
		}
		return parts
	}
	header := cells(lines[0])
	if len(header)-1 != len(docStores) {
		t.Errorf("the table has %d store columns; the test knows %d stores", len(header)-1, len(docStores))
	}
	rows := map[string][]string{}
	for _, line := range lines[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		c := cells(line)
		rows[c[0]] = c
	}
	for _, f := range docFeatures {
		var row []string
		for name, c := range rows {
			if strings.HasPrefix(name, f.row) {
				row = c
			}
		}
		if row == nil {
			t.Errorf("no %q row in the table", f.row)
			continue
		}
		for j, store := range header[1:] {
			typ, ok := docStores[store]
			if !ok {
				t.Errorf("column %q: no driver type known for it", store)
				continue
			}
			cell := strings.TrimRight(row[j+1], "⁰¹²³⁴⁵⁶⁷⁸⁹")
			want := f.fallback
			if typ.Implements(f.iface) {
				want = "atomic"
			}
			if cell != want {
				t.Errorf("%s × %s: the table says %q; %v implements %v: %t, so want %q",
					f.row, store, cell, typ, f.iface, typ.Implements(f.iface), want)
			}
		}
	}
}
