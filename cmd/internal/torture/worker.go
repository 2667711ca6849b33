package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
)

// WorkerEnv is the environment variable that makes a process a torture
// worker; its value is the worker's configuration, as JSON. The tool and
// the tests re-execute their own binary with it set.
const WorkerEnv = "FENCE_TORTURE_WORKER"

// IsWorker reports whether this process was started as a torture worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// workerConfig is what the parent tells a worker.
type workerConfig struct {
	ID       int           `json:"id"`
	Store    string        `json:"store"`    // store URL, through the worker's proxies
	Register string        `json:"register"` // register URL, through the worker's proxy
	RegKind  string        `json:"reg_kind"` // RegisterMemory or RegisterPostgres
	NoGuard  bool          `json:"no_guard"`
	Wait     time.Duration `json:"guard_wait,omitempty"`   // Config.guardWait
	Broken   bool          `json:"broken_guard,omitempty"` // Config.brokenGuard
	WriteFor time.Duration `json:"write_for,omitempty"`    // Config.writeTimeout
	Keys     []string      `json:"keys"`
	Kind     LeaseKind     `json:"kind,omitempty"`  // Config.Kind
	Limit    int           `json:"limit,omitempty"` // Config.Limit
	TTL      time.Duration `json:"ttl"`
	Writes   int           `json:"writes"`
	Work     time.Duration `json:"work"`
	Seed     uint64        `json:"seed"`
	Worker   WorkerKind    `json:"worker,omitempty"` // Config.Worker
	Fence    string        `json:"fence,omitempty"`  // Config.Fence
}

// WorkerMain runs a torture worker and returns its exit status. It loops
// until its standard input closes (the parent's signal to stop, which also
// comes when the parent dies): acquire a key, make Writes protected writes
// to the register with the lease's token, read the register, release. It
// writes every operation as an Event on its standard output, and what goes
// wrong on its standard error.
//
// Before each write the worker checks that its lease is still held, then
// does Work (a sleep: the slow step between the check and the write that
// every real program has), then writes under a context of its own, not the
// lease's: a pause or partition that lands in that step is what only the
// fencing token can catch.
func WorkerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "torture worker: bad %s: %v\n", WorkerEnv, err)
		return 2
	}
	if os.Getenv(commandEnv) != "" {
		return commandMain() // a fence-run worker's command
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent closes it or dies
		stop()
	}()
	if cfg.Worker == WorkerFenceRun {
		return fenceRunWorker(ctx, cfg)
	}
	// The store or the register may be down when the worker starts (the
	// restart fault): try until they answer.
	var (
		w   *worker
		err error
	)
	for {
		if w, err = newWorker(ctx, cfg, os.Stdout); err == nil || ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "torture worker %d: %v; retrying\n", cfg.ID, err)
		sleep(ctx, cfg.TTL/4)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "torture worker %d: %v\n", cfg.ID, err)
		return 1
	}
	defer w.close()
	w.emit(Event{Op: OpReady})
	w.loop(ctx)
	return 0
}

type worker struct {
	cfg    workerConfig
	client *fence.Client
	closer io.Closer
	reg    registerClient
	rng    *rand.Rand

	mu  sync.Mutex // serializes event lines
	out *bufio.Writer
	ids atomic.Int64
}

func newWorker(ctx context.Context, cfg workerConfig, out io.Writer) (*worker, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	drv, closer, err := storeurl.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	reg, err := openRegister(ctx, cfg)
	if err == nil {
		// Connect now, so the first write does not pay for it.
		if _, _, err = reg.Read(ctx, cfg.Keys[0]); err != nil {
			reg.Close()
		}
	}
	if err != nil {
		closer.Close()
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &worker{
		cfg:    cfg,
		client: fence.New(drv, fence.WithTTL(cfg.TTL), fence.WithOwner(fmt.Sprintf("worker-%d", cfg.ID)), fence.WithLogger(logger)),
		closer: closer,
		reg:    reg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))),
		out:    bufio.NewWriter(out),
	}, nil
}

func (w *worker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.client.Close(ctx)
	w.reg.Close()
	_ = w.closer.Close()
}

// emit writes one event line at once: the parent must see it even if this
// process is killed right after.
func (w *worker) emit(e Event) {
	e.W = w.cfg.ID
	if e.T == 0 {
		e.T = Now()
	}
	b, _ := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(b)
	w.out.WriteByte('\n')
	w.out.Flush()
}

func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		key := w.cfg.Keys[w.rng.IntN(len(w.cfg.Keys))]
		w.lease(ctx, key)
		// A short random gap, so that other workers get the key too.
		sleep(ctx, time.Duration(w.rng.Int64N(int64(w.cfg.Work)+1)))
	}
}

// nextKind chooses what the next lease takes: a reader-writer plan's
// worker is a reader or a writer at random, lease by lease.
func (w *worker) nextKind() fence.Kind {
	switch w.cfg.Kind {
	case KindSemaphore:
		return fence.KindSemaphore
	case KindRW:
		if w.rng.IntN(2) == 0 {
			return fence.KindWrite
		}
		return fence.KindRead
	}
	return fence.KindLock
}

func (w *worker) acquire(ctx context.Context, key string, k fence.Kind) (*fence.Lease, error) {
	switch k {
	case fence.KindSemaphore:
		return w.client.Semaphore(key, w.cfg.Limit).Acquire(ctx)
	case fence.KindRead:
		return w.client.RWMutex(key).AcquireRead(ctx)
	case fence.KindWrite:
		return w.client.RWMutex(key).AcquireWrite(ctx)
	}
	return w.client.Acquire(ctx, key)
}

// kindName names k in events; a lock's is empty, as in histories
// recorded before other kinds.
func kindName(k fence.Kind) string {
	if k == fence.KindLock {
		return ""
	}
	return k.String()
}

// lease is one round: acquire key, write (a reader reads instead), read,
// release.
func (w *worker) lease(ctx context.Context, key string) {
	id := w.ids.Add(1)
	k := w.nextKind()
	kn := kindName(k)
	w.emit(Event{Op: OpAcquire, Ph: Call, ID: id, Key: key, Kind: kn})
	actx, cancel := context.WithTimeout(ctx, 4*w.cfg.TTL)
	l, err := w.acquire(actx, key, k)
	cancel()
	if err != nil {
		w.emit(Event{Op: OpAcquire, Ph: Ret, ID: id, Key: key, Kind: kn, Res: ResFail, Err: err.Error()})
		if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(os.Stderr, "worker %d: acquire %q: %v\n", w.cfg.ID, key, err)
			sleep(ctx, w.cfg.TTL/4) // the store may be down: do not spin
		}
		return
	}
	valid := int64(l.ValidFor())
	if valid <= 0 && errors.Is(l.Err(), fence.ErrLost) {
		// Lost between the grant and this look (a wipe's deletion that
		// the store reported at once): ValidFor says 0 for an ended
		// lease, which tells nothing of its validity at the grant. The
		// loss itself is recorded where the worker learns of it.
		valid = validUnknown
	}
	w.emit(Event{Op: OpAcquire, Ph: Ret, ID: id, Key: key, Kind: kn, Token: l.Token(), Res: ResOK, Valid: valid})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		<-l.Done()
		if cause := context.Cause(l.Context()); errors.Is(cause, fence.ErrLost) {
			w.emit(Event{Op: OpLost, Key: key, Token: l.Token(), Err: cause.Error()})
		}
	}()

	for i := range w.cfg.Writes {
		if l.Err() != nil {
			break // a careful holder stops once it knows the lease is gone
		}
		sleep(context.Background(), w.cfg.Work) // the slow step: pauses land here
		if k == fence.KindRead {
			w.read(key) // a reader must not change what it shares
			continue
		}
		res := w.write(key, l.Token(), fmt.Sprintf("w%d.%d.%d", w.cfg.ID, l.Token(), i))
		if res == ResStale {
			break // the resource says a newer holder exists
		}
	}
	if l.Err() == nil {
		w.read(key)
	}

	rid := w.ids.Add(1)
	w.emit(Event{Op: OpRelease, Ph: Call, ID: rid, Key: key, Token: l.Token()})
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
	err = l.Release(rctx)
	cancel()
	res := ResOK
	switch {
	case errors.Is(err, fence.ErrLost):
		res = ResLost
	case err != nil:
		res = ResFail
	}
	w.emit(Event{Op: OpRelease, Ph: Ret, ID: rid, Key: key, Token: l.Token(), Res: res, Err: errString(err)})
	<-watched
}

func (w *worker) write(key string, token int64, val string) string {
	id := w.ids.Add(1)
	w.emit(Event{Op: OpWrite, Ph: Call, ID: id, Key: key, Token: token, Val: val})
	timeout := w.cfg.TTL
	if w.cfg.WriteFor > 0 {
		timeout = w.cfg.WriteFor
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	res, err := w.reg.Write(ctx, key, token, val)
	cancel()
	w.emit(Event{Op: OpWrite, Ph: Ret, ID: id, Key: key, Token: token, Val: val, Res: res, Err: errString(err)})
	return res
}

func (w *worker) read(key string) {
	id := w.ids.Add(1)
	w.emit(Event{Op: OpRead, Ph: Call, ID: id, Key: key})
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
	token, val, err := w.reg.Read(ctx, key)
	cancel()
	if err != nil {
		w.emit(Event{Op: OpRead, Ph: Ret, ID: id, Key: key, Res: ResFail, Err: err.Error()})
		return
	}
	w.emit(Event{Op: OpRead, Ph: Ret, ID: id, Key: key, Token: token, Val: val, Res: ResOK})
}

func openRegister(ctx context.Context, cfg workerConfig) (registerClient, error) {
	switch cfg.RegKind {
	case RegisterMemory:
		return newHTTPRegisterClient(cfg.Register), nil
	case RegisterPostgres, RegisterPostgresGuardOnly:
		return newPGRegisterClient(ctx, cfg.Register, cfg.NoGuard, cfg.RegKind == RegisterPostgresGuardOnly, cfg.Wait, cfg.Broken)
	}
	return nil, fmt.Errorf("unknown register %q", cfg.RegKind)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
