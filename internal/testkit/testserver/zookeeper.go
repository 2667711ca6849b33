package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ZooKeeperTick is the tickTime of the private ZooKeeper servers. The
// smallest session timeout a client can get is two ticks (400ms), so tests
// can make sessions expire quickly; the largest is raised to 60s.
const ZooKeeperTick = 200 * time.Millisecond

// ZooKeeperServer is a private standalone ZooKeeper (3.8, Debian's zookeeper
// package) whose data survives Kill and Restart. While Stop()ed it expires
// nothing; on Cont it expires the sessions whose timeout passed meanwhile,
// and a client that reconnects to it then learns its session is gone.
type ZooKeeperServer struct {
	*Process
}

// ZooKeeper starts a standalone ZooKeeper (ZooKeeperServerMain in a JVM) on
// a free loopback port with its own zoo.cfg and data directory, and waits
// until it answers ruok with imok and serves (srvr). Options' Args are extra
// zoo.cfg lines (key=value).
func ZooKeeper(t testing.TB, opts ...Option) *ZooKeeperServer {
	t.Helper()
	java, jvm := zkJVM(t)
	o := collect(opts)
	o.check(t, "ZooKeeper", credentials{clock: true})
	base := dataDir(t, "zk")
	cfg := filepath.Join(base, "zoo.cfg")
	s := &ZooKeeperServer{}
	startRetrying(t, "zookeeper", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		lines := append([]string{
			"tickTime=" + strconv.Itoa(int(ZooKeeperTick/time.Millisecond)),
			"maxSessionTimeout=60000",
			"dataDir=" + filepath.Join(base, "data"),
			"clientPort=" + strconv.Itoa(port),
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"4lw.commands.whitelist=*",
			"maxClientCnxns=0",
		}, o.args...)
		if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.Process = newProcess(t, procSpec{
			name: "zookeeper",
			path: java,
			args: append(slices.Clone(jvm), "org.apache.zookeeper.server.ZooKeeperServerMain", cfg),
			env:  o.clock.env(),
			dir:  base,
			port: port,
			ping: func(ctx context.Context) error {
				if out, err := zkFourLetter(ctx, addr, "ruok"); err != nil || out != "imok" {
					return fmt.Errorf("ruok answered %q, %v", out, err)
				}
				out, err := zkFourLetter(ctx, addr, "srvr")
				if err == nil && !strings.Contains(out, "Mode: ") {
					err = fmt.Errorf("srvr: %s", strings.TrimSpace(out))
				}
				return err
			},
		})
		return s.start()
	})
	return s
}

// zkJVM returns the java binary and the JVM's arguments (before the main
// class) for a ZooKeeper server: a small heap and quick start, the
// admin server and JMX off, and Debian's zookeeper.jar as the class path.
// Its manifest's Class-Path names its dependencies; only an SLF4J
// binding is missing, so the log has text.
func zkJVM(t testing.TB) (java string, args []string) {
	t.Helper()
	java = Require(t, "java")
	classpath := Require(t, "zookeeper")
	if simple := filepath.Join(filepath.Dir(classpath), "slf4j-simple.jar"); fileExists(simple) {
		classpath += string(os.PathListSeparator) + simple
	}
	return java, []string{
		"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-cp", classpath,
	}
}

// zkFourLetter sends a four-letter word and returns the whole answer.
func zkFourLetter(ctx context.Context, addr, word string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 1<<16))
	return string(b), err
}
