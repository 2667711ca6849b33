package storeurl

import (
	"context"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

func init() {
	register("mem", scheme{open: openMem, local: true, forms: []string{"mem: (in this process only, for tests)"}})
}

var (
	memMu     sync.Mutex
	memStores = map[string]*fencemem.Store{}
)

// openMem opens mem: or mem:NAME (also mem://NAME): an in-memory store,
// shared by every Open of the same name in this process.
func openMem(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	name := u.Opaque
	if name == "" {
		name = u.Host + strings.TrimPrefix(u.Path, "/")
	}
	if u.RawQuery != "" {
		return nil, nil, badURL(u, "a mem URL takes no parameters")
	}
	memMu.Lock()
	defer memMu.Unlock()
	s := memStores[name]
	if s == nil {
		s = fencemem.New()
		memStores[name] = s
	}
	return s, nopCloser{}, nil
}
