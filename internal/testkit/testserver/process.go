package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ReadyTimeout bounds how long a start or restart waits for a server to
// answer its protocol ping. It is generous: the machines that run these tests
// have two shared cores, and a JVM or a cluster election can be slow there.
const ReadyTimeout = 60 * time.Second

// An Option changes how a server is started.
type Option func(*options)

type options struct {
	args []string
	// The credentials the server requires of its clients (see Token,
	// Password, SentinelPassword).
	token, user, password, sentinelPassword string
	clock                                   *FakeClock
	net                                     *Net
}

// Args appends extra command-line arguments to the server's own. For
// ZooKeeper, each is a line (key=value) added to the generated zoo.cfg.
func Args(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// OnNet starts a cluster's members on the hosts of n, member i on host i
// (n must have a host per member): they listen on their host's address
// and talk to one another over n, which can then cut them apart
// (Net.Partition). EtcdCluster, ZooKeeperEnsemble, NATSCluster,
// RedisSentinel, RedisClusterReplicas and PostgresPair take it.
func OnNet(n *Net) Option {
	return func(o *options) { o.net = n }
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Process is one private server process started by this package. Its
// methods Kill, Stop, Cont, Pid and Addr may be called from any goroutine;
// Restart fails the test on error and so belongs to the test goroutine.
type Process struct {
	tb      testing.TB
	name    string // short name for messages, e.g. "redis-server"
	path    string
	args    []string
	dir     string
	cred    *syscall.Credential
	env     []string // added to this process's environment
	net     *Net     // the test hosts it runs on, if not the test's own namespace
	host    int      // its host on net
	addr    string
	port    int
	logPath string
	ping    func(ctx context.Context) error
	pre     func() error

	mu     sync.Mutex
	run    *run // nil when not running
	starts int
}

// run is one start of a Process.
type run struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	err    error         // cmd.Wait's result, set before exited is closed
}

// procSpec describes a server process before it is started.
type procSpec struct {
	name string   // for messages and the log file name
	path string   // program
	args []string // arguments, without the program
	dir  string   // working directory: the server's own data directory
	cred *syscall.Credential
	env  []string // added to the environment (FakeClock's)
	port int      // the port it listens on; Addr is 127.0.0.1:port
	// net, if set, runs the process on host of the test hosts net; its
	// Addr is then the host's address and port.
	net  *Net
	host int
	ping func(ctx context.Context) error // one protocol-level readiness check
	// prestart, if set, runs before every start (first and restarts).
	prestart func() error
}

// newProcess prepares a process and registers the cleanup that kills it and,
// if the test failed, prints the tail of its log. It does not start it.
func newProcess(tb testing.TB, s procSpec) *Process {
	ip := "127.0.0.1"
	if s.net != nil {
		ip = s.net.IP(s.host)
	}
	p := &Process{
		tb:      tb,
		net:     s.net,
		host:    s.host,
		name:    s.name,
		path:    s.path,
		args:    s.args,
		dir:     s.dir,
		cred:    s.cred,
		env:     s.env,
		port:    s.port,
		addr:    net.JoinHostPort(ip, strconv.Itoa(s.port)),
		logPath: filepath.Join(tb.TempDir(), fmt.Sprintf("%s-%d.log", s.name, s.port)),
		ping:    s.ping,
		pre:     s.prestart,
	}
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("testserver: %s on %s, last lines of %s:\n%s", p.name, p.addr, p.logPath, p.LogTail())
		}
	})
	return p
}

// Addr returns the server's client address, "127.0.0.1:port" (or its test
// host's address and port, OnNet). It does not change across restarts.
func (p *Process) Addr() string { return p.addr }

// Port returns the port of Addr.
func (p *Process) Port() int { return p.port }

// Pid returns the server's process id, or 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return 0
	}
	return p.run.cmd.Process.Pid
}

// LogPath returns the file the server's output goes to (under t.TempDir()).
func (p *Process) LogPath() string { return p.logPath }

// LogTail returns the last lines of the server's log.
func (p *Process) LogTail() string { return logTail(p.logPath, 40) }

// Kill sends SIGKILL to the server and every process it started, and waits
// until they are gone. Data stays, so Restart can bring the server back.
// Killing a server that is not running does nothing.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.killLocked(); err != nil {
		p.tb.Errorf("testserver: kill %s: %v", p.name, err)
	}
}

func (p *Process) killLocked() error {
	if p.run == nil {
		return nil
	}
	leader := p.run.cmd.Process.Pid
	// Freeze the leader so it forks no more, then kill it and everything it
	// started. Its process group is not enough: PostgreSQL's children make
	// themselves group leaders, outlive a killed postmaster for a while and
	// keep its shared memory, which makes a restart refuse to start.
	_ = syscall.Kill(leader, syscall.SIGSTOP)
	tree := processTree(leader)
	for _, pr := range tree {
		_ = syscall.Kill(pr.pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-leader, syscall.SIGKILL)
	<-p.run.exited
	p.run = nil
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive := stillAlive(tree)
		if len(alive) == 0 && !groupAlive(leader) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v (group %d) still alive 30s after SIGKILL", alive, leader)
		}
		for _, pid := range alive {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-leader, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop pauses the server with SIGSTOP (all its processes), as a GC pause or
// a frozen VM would: connections stay open, nothing answers. Cont resumes it.
func (p *Process) Stop() { p.signal(syscall.SIGSTOP) }

// Cont resumes a server paused by Stop.
func (p *Process) Cont() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		p.tb.Errorf("testserver: %s %s: %v", sig, p.name, errNotRunning)
		return
	}
	// The leader first: once stopped it forks no more.
	leader := p.run.cmd.Process.Pid
	if err := syscall.Kill(leader, sig); err != nil {
		p.tb.Errorf("testserver: %s %s: %v", sig, p.name, err)
	}
	for _, pr := range processTree(leader) {
		_ = syscall.Kill(pr.pid, sig)
	}
	_ = syscall.Kill(-leader, sig)
}

// Restart kills the server if it runs, starts it again with the same port,
// arguments and data directory, and waits until it answers. What survives
// is the server's own business: Redis here keeps nothing, PostgreSQL and
// MariaDB keep committed data. It fails the test if the server does not come
// back, so call it from the test goroutine.
func (p *Process) Restart() {
	p.tb.Helper()
	p.mu.Lock()
	err := p.killLocked()
	p.mu.Unlock()
	if err == nil {
		err = p.start()
	}
	if err != nil {
		p.tb.Fatalf("testserver: restart: %v", err)
	}
}

// start launches the process and waits until it is ready. On failure the
// process is killed and the error names the program, its arguments and the
// tail of its log; errors.Is(err, errAddrInUse) when the port was taken.
func (p *Process) start() error {
	p.mu.Lock()
	err := p.launchLocked()
	p.mu.Unlock()
	if err != nil {
		return p.describe(err)
	}
	err = p.waitReady()
	if err != nil {
		p.mu.Lock()
		kerr := p.killLocked()
		p.mu.Unlock()
		return p.describe(errors.Join(err, kerr))
	}
	return nil
}

func (p *Process) launchLocked() error {
	if p.run != nil {
		return errors.New("already running")
	}
	if p.pre != nil {
		if err := p.pre(); err != nil {
			return err
		}
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	p.starts++
	fmt.Fprintf(log, "=== testserver: start %d at %s: %s %s\n", p.starts,
		time.Now().Format(time.RFC3339Nano), p.path, quoteArgs(p.args))

	path, args, cred := p.path, p.args, p.cred
	if p.net != nil {
		if cred != nil {
			// Entering a namespace takes root: ip enters it as root,
			// and setpriv then drops to the server's user.
			args = append([]string{
				"--reuid=" + strconv.Itoa(int(cred.Uid)), "--regid=" + strconv.Itoa(int(cred.Gid)), "--clear-groups",
				path}, args...)
			path, cred = "setpriv", nil
		}
		path, args = p.net.command(p.host, path, args)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = p.dir
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdin = nil
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,            // so Kill/Stop/Cont reach the whole server
		Pdeathsig:  syscall.SIGKILL, // no orphans if the test binary dies
		Credential: cred,
	}
	if err := startOnSpawner(cmd); err != nil {
		return err
	}
	r := &run{cmd: cmd, exited: make(chan struct{})}
	p.run = r
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	return nil
}

// Pdeathsig is delivered when the thread that forked the child exits, not
// the process (golang/go#27505); Go may end a thread whose goroutine exits
// while locked to it. So every server is forked from one goroutine locked to
// its thread for the life of the test binary.
var spawner = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go spawnLoop(ch)
	return ch
})

// spawnLoop runs the forks, on one thread for the life of the test binary.
// It is a named function so that IgnoreLeaks can name it.
func spawnLoop(ch <-chan func()) {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
	for f := range ch {
		f()
	}
}

func startOnSpawner(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawner() <- func() { done <- cmd.Start() }
	return <-done
}

var errAddrInUse = errors.New("port already in use")

// waitReady polls the server's ping until it answers, the process exits,
// or ReadyTimeout passes.
func (p *Process) waitReady() error {
	p.mu.Lock()
	r := p.run
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	start := time.Now()
	delay := 20 * time.Millisecond
	var last error
	for {
		select {
		case <-r.exited:
			err := fmt.Errorf("exited during startup after %v: %v", time.Since(start).Round(time.Millisecond), r.err)
			if looksAddrInUse(p.logPath) {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		default:
		}
		if last = p.pingOnce(ctx); last == nil {
			// Something answered on our port; make sure it is our server and
			// not another test's that took the port first (ours then exits
			// or is about to, failing to bind).
			// (A server on a test host has its host's address to itself.)
			if mine, known := listenerOwnedBy(r.cmd.Process.Pid, p.port); p.net == nil && known && !mine {
				return fmt.Errorf("%w: another process answers on %s", errAddrInUse, p.addr)
			}
			select {
			case <-r.exited:
				continue // reported at the top of the loop
			default:
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v; last ping error: %v", ReadyTimeout, last)
		case <-r.exited:
		case <-time.After(delay):
		}
		delay = min(delay*3/2, 250*time.Millisecond)
	}
}

func (p *Process) pingOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.ping(ctx)
}

func (p *Process) describe(err error) error {
	return fmt.Errorf("%s on %s: %w\ncommand: %s %s\nlast lines of %s:\n%s",
		p.name, p.addr, err, p.path, quoteArgs(p.args), p.logPath, p.LogTail())
}

// startRetrying runs attempt until it succeeds, retrying a few times (on new
// ports) when a port turns out to be taken by someone else between choosing
// it and binding it. Any other failure fails the test: a server that exists
// but does not start is a bug to see, never a skip.
func startRetrying(tb testing.TB, what string, attempt func() error) {
	tb.Helper()
	const attempts = 4
	var err error
	for i := 0; i < attempts; i++ {
		if err = attempt(); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
		tb.Logf("testserver: %s: port collision, retrying on another port: %v", what, firstLine(err))
	}
	if err != nil {
		tb.Fatalf("testserver: %s did not start: %v", what, err)
	}
}

// runLogged runs a setup program to completion with its output in logPath,
// and returns an error with the output's tail if it fails.
func runLogged(logPath, dir string, cred *syscall.Credential, bin string, args ...string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	err = startOnSpawner(cmd) // see spawner: keeps Pdeathsig reliable
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v\nlast lines of %s:\n%s", bin, quoteArgs(args), err, logPath, logTail(logPath, 40))
	}
	return nil
}

// Ports.
//
// Ports come from below the kernel's ephemeral range (32768+ on Linux), so
// that a client's outgoing connection can never be holding a killed
// server's port when the test restarts it there. Within this test binary a
// port is handed out once; across binaries (go test runs packages in
// parallel) a collision is possible and startRetrying handles it.

var (
	portMu   sync.Mutex
	usedPort = map[int]bool{}
	// forcePortForTest, if set, is the next port handed out: tests use it
	// to make a start collide.
	forcePortForTest int
)

const (
	portLow  = 10000
	portHigh = 32768 // exclusive; also the default start of the ephemeral range
)

// freePort returns a port that is free on 127.0.0.1 now; if offset > 0,
// port+offset is free too (Redis Cluster's bus port).
func freePort(offset int) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	if p := forcePortForTest; p != 0 {
		forcePortForTest = 0
		return p, nil
	}
	high := portHigh
	if lo := ephemeralLow(); lo > portLow+1000 && lo < high {
		high = lo
	}
	if offset > 0 {
		high -= offset
	}
	if high-portLow < 1000 {
		return kernelPort()
	}
	for range 1000 {
		port := portLow + rand.IntN(high-portLow)
		if usedPort[port] || (offset > 0 && usedPort[port+offset]) {
			continue
		}
		if !canBind(port) || (offset > 0 && !canBind(port+offset)) {
			continue
		}
		usedPort[port] = true
		if offset > 0 {
			usedPort[port+offset] = true
		}
		return port, nil
	}
	return 0, errors.New("testserver: no free port found")
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	usedPort[port] = true
	return port, nil
}

func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// Directories.

// dataDir makes a fresh directory for a server's data and sockets, and
// registers its removal (which runs after the server is killed, since
// cleanups run last-in first-out and the process registers its own later).
// It is short and outside t.TempDir(): Unix socket paths are limited to 107
// bytes, and a server run as another user (PostgreSQL under root) cannot
// enter t.TempDir(), which is private to root.
func dataDir(tb testing.TB, name string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "fence-"+name+"-")
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("testserver: remove %s: %v", dir, err)
		}
	})
	return dir
}

// Logs.

func logTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const maxBytes = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(fi.Size()-maxBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	b = bytes.TrimRight(b, "\n")
	all := strings.Split(string(b), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "\t" + strings.Join(all, "\n\t")
}

func looksAddrInUse(logPath string) bool {
	tail := strings.ToLower(logTail(logPath, 60))
	// The latest start only: earlier starts' lines do not count.
	if i := strings.LastIndex(tail, "=== testserver: start"); i >= 0 {
		tail = tail[i:]
	}
	return strings.Contains(tail, "address already in use") || strings.Contains(tail, "eaddrinuse")
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'*$") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Linux /proc: who is in a process group, who owns a listening socket.

// groupAlive reports whether any process of the group is still running
// (zombies waiting for a parent to reap them do not count).
func groupAlive(pgid int) bool {
	procs, ok := allProcs()
	if !ok {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, pr := range procs {
		if pr.pgid == pgid && pr.running() {
			return true
		}
	}
	return false
}

type procInfo struct {
	pid, ppid, pgid int
	state           byte
	start           string // start time in clock ticks: tells a reused pid apart
}

func (pr procInfo) running() bool { return pr.state != 'Z' && pr.state != 'X' }

// readProc parses /proc/pid/stat.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) == 0 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0], start: f[19]}, true
}

func allProcs() ([]procInfo, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pr, ok := readProc(pid); ok {
			out = append(out, pr)
		}
	}
	return out, true
}

// processTree returns root's descendants (by parent) and the members of its
// process group, root included. Empty when /proc cannot tell.
func processTree(root int) []procInfo {
	procs, ok := allProcs()
	if !ok {
		return nil
	}
	in := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for _, pr := range procs {
			if !in[pr.pid] && (in[pr.ppid] || pr.pgid == root) {
				in[pr.pid] = true
				changed = true
			}
		}
	}
	var out []procInfo
	for _, pr := range procs {
		if in[pr.pid] {
			out = append(out, pr)
		}
	}
	return out
}

// stillAlive returns the pids of tree that still run (the same process: not
// a zombie, not a new process that reused the pid).
func stillAlive(tree []procInfo) []int {
	var out []int
	for _, old := range tree {
		if now, ok := readProc(old.pid); ok && now.start == old.start && now.running() {
			out = append(out, old.pid)
		}
	}
	return out
}

// listenerOwnedBy reports whether leader or a process it started holds the
// socket listening on port. known is false when /proc cannot tell.
func listenerOwnedBy(leader, port int) (mine, known bool) {
	inodes := map[string]bool{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		known = true
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A = LISTEN
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseInt(f[1][i+1:], 16, 32); err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if !known || len(inodes) == 0 {
		return false, false
	}
	// An empty tree means the leader is gone: whoever listens is not ours.
	for _, pr := range processTree(leader) {
		dir := "/proc/" + strconv.Itoa(pr.pid) + "/fd/"
		fds, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrPermission) {
			return false, false // not allowed to look: claim no collision
		}
		if err != nil {
			continue // exited meanwhile
		}
		for _, fd := range fds {
			if link, err := os.Readlink(dir + fd.Name()); err == nil && inodes[link] {
				return true, true
			}
		}
	}
	return false, true
}

// startTogether starts the members of a cluster at once, each waiting
// until it answers (none does before a quorum of them is up), and kills
// them all if any failed.
func startTogether(ps []*Process) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.start() })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		for _, p := range ps {
			p.Kill()
		}
	}
	return err
}
