package testserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Net is a private network of test hosts: each host is a network namespace
// of its own with one address, joined to the other hosts and to the test's
// own namespace by a bridge. Servers started on a host (OnHost) listen on
// its address; clients in the test's namespace reach every host, and
// Partition cuts the links between hosts without touching the clients'.
// That is the partition a cluster member meets when it loses its peers but
// not its clients (the Jepsen etcd lock scenario).
//
// A cut link drops every packet between the two hosts, both ways, by a
// blackhole route in each host's namespace: connections already open go
// silent, new ones fail at once. Nothing leaves the machine: the bridge has
// no uplink and forwarding is not enabled.
//
// Net needs root and the ip program (Debian package iproute2); without
// them NewNet calls Unavailable. The namespaces and the bridge are removed
// at the test's end, and those of a test binary that died are removed by
// the next NewNet.
type Net struct {
	tb     testing.TB
	id     string // names this net's bridge, links and namespaces
	subnet string // "10.a.b.", the hosts' /24 without its last octet
	ip     string // the ip program
	hosts  []string

	mu  sync.Mutex
	cut map[[2]int]bool // links cut, i < j
}

// netnsPrefix starts the name of every namespace NewNet makes:
// netnsPrefix + pid + "-" + id + "-" + host.
const netnsPrefix = "fence-"

// NewNet makes a network of n test hosts.
func NewNet(tb testing.TB, n int) *Net {
	tb.Helper()
	if n < 1 || n > 200 {
		tb.Fatalf("testserver: NewNet takes 1 to 200 hosts, got %d", n)
	}
	ip := Require(tb, "ip")
	if os.Geteuid() != 0 {
		Unavailable(tb, "testserver: network namespaces need root (running as uid %d)", os.Geteuid())
	}
	sweepNets(ip)
	nt := &Net{tb: tb, ip: ip, cut: map[[2]int]bool{}}
	nt.id = fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	nt.subnet = freeSubnet(ip)
	bridge := "fnb" + nt.id
	tb.Cleanup(nt.remove)
	if err := nt.run("link", "add", bridge, "type", "bridge"); err != nil {
		// No netns support at all (a container without CAP_NET_ADMIN).
		Unavailable(tb, "testserver: cannot make a bridge for test hosts: %v", err)
	}
	steps := [][]string{
		{"addr", "add", nt.subnet + "1/24", "dev", bridge},
		{"link", "set", bridge, "up"},
	}
	for i := range n {
		ns := fmt.Sprintf("%s%d-%s-%d", netnsPrefix, os.Getpid(), nt.id, i)
		veth := fmt.Sprintf("fnv%s%d", nt.id, i)
		nt.hosts = append(nt.hosts, ns)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", veth, "master", bridge, "up"},
			[]string{"-n", ns, "addr", "add", nt.IP(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := nt.run(s...); err != nil {
			tb.Fatalf("testserver: making test hosts: %v", err)
		}
	}
	return nt
}

// Len returns the number of hosts.
func (n *Net) Len() int { return len(n.hosts) }

// IP returns host i's address.
func (n *Net) IP(i int) string { return n.subnet + strconv.Itoa(i+2) }

// Isolate cuts host i from every other host; the test's namespace still
// reaches it.
func (n *Net) Isolate(i int) error {
	var others []int
	for j := range n.hosts {
		if j != i {
			others = append(others, j)
		}
	}
	return n.Partition([]int{i}, others)
}

// Partition cuts every link between hosts of different groups. Links cut
// before stay cut until Heal.
func (n *Net) Partition(groups ...[]int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for gi, g := range groups {
		for _, h := range groups[gi+1:] {
			for _, i := range g {
				for _, j := range h {
					if err := n.setLink(i, j, true); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Heal restores every cut link.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for l := range n.cut {
		errs = append(errs, n.setLink(l[0], l[1], false))
	}
	return errors.Join(errs...)
}

// Cut reports the links cut now, as pairs of hosts.
func (n *Net) Cut() [][2]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out [][2]int
	for l := range n.cut {
		out = append(out, l)
	}
	return out
}

// setLink cuts (or restores) the link between hosts i and j: a blackhole
// route to the other's address in each one's namespace.
func (n *Net) setLink(i, j int, cut bool) error {
	if i == j || i < 0 || j < 0 || i >= len(n.hosts) || j >= len(n.hosts) {
		return fmt.Errorf("testserver: no link between hosts %d and %d of %d", i, j, len(n.hosts))
	}
	if i > j {
		i, j = j, i
	}
	l := [2]int{i, j}
	if n.cut[l] == cut {
		return nil
	}
	verb := "add"
	if !cut {
		verb = "del"
	}
	for _, e := range [][2]int{{i, j}, {j, i}} {
		if err := n.run("-n", n.hosts[e[0]], "route", verb, "blackhole", n.IP(e[1])+"/32"); err != nil {
			return err
		}
	}
	if cut {
		n.cut[l] = true
	} else {
		delete(n.cut, l)
	}
	return nil
}

// command returns how to run bin with args on host i: through ip netns
// exec, which enters the namespace and then executes bin itself (the
// process keeps its pid).
func (n *Net) command(i int, bin string, args []string) (string, []string) {
	return n.ip, append([]string{"netns", "exec", n.hosts[i], bin}, args...)
}

func (n *Net) run(args ...string) error {
	out, err := exec.Command(n.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// remove deletes the hosts and the bridge (the hosts' links go with their
// namespaces).
func (n *Net) remove() {
	for _, ns := range n.hosts {
		if err := n.run("netns", "del", ns); err != nil {
			n.tb.Errorf("testserver: removing test host: %v", err)
		}
	}
	if err := n.run("link", "del", "fnb"+n.id); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		n.tb.Errorf("testserver: removing the test hosts' bridge: %v", err)
	}
}

// sweepNets removes the namespaces and bridges of test binaries that died
// without removing theirs.
func sweepNets(ip string) {
	out, err := exec.Command(ip, "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(f[0], netnsPrefix), "-")
		if len(parts) != 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // alive: its own
		}
		_ = exec.Command(ip, "netns", "del", f[0]).Run()
		_ = exec.Command(ip, "link", "del", "fnb"+parts[1]).Run()
	}
}

// freeSubnet picks a /24 in 10.200.0.0/13 that no interface of the test's
// namespace has an address in.
func freeSubnet(ip string) string {
	out, _ := exec.Command(ip, "-4", "-o", "addr", "show").Output()
	for {
		s := fmt.Sprintf("10.%d.%d.", 200+rand.IntN(8), rand.IntN(256))
		if !strings.Contains(string(out), " "+s) {
			return s
		}
	}
}

// memberIP is the address cluster member i listens on: its host's on n,
// loopback without one.
func memberIP(n *Net, i int) string {
	if n == nil {
		return "127.0.0.1"
	}
	return n.IP(i)
}
