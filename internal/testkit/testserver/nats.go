package testserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NATSServer is a private nats-server with JetStream, storing in its own
// directory, which survives Kill and Restart.
type NATSServer struct {
	*Process
	version string
}

// natsAuth is what a client gives in its CONNECT: a token, or a user and
// password; nothing if all are empty.
type natsAuth struct {
	Token    string `json:"auth_token,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"pass,omitempty"`
}

// URL returns "nats://127.0.0.1:port".
func (s *NATSServer) URL() string { return "nats://" + s.Addr() }

// Version returns the server's version without the "v", e.g. "2.15.2".
func (s *NATSServer) Version() string { return s.version }

// AtLeast reports whether the server's version is at least min ("2.11" or
// "2.11.0"). Per-key TTLs in JetStream KV need 2.11.
func (s *NATSServer) AtLeast(min string) bool { return versionAtLeast(s.version, min) }

// NATS starts a private nats-server -js on a free loopback port, preferring
// the one scripts/test installs (RepoRoot()/.tools/bin/nats-server), then
// $FENCE_NATS_SERVER, then PATH, and waits until it answers PING and a
// JetStream API request. With Token or Password it requires them of every
// client, and its readiness check gives them.
func NATS(t testing.TB, opts ...Option) *NATSServer {
	t.Helper()
	bin := Require(t, "nats-server")
	o := collect(opts)
	o.check(t, "NATS", credentials{token: true, user: true, password: true, clock: true})
	auth := natsAuth{Token: o.token, User: o.user, Password: o.password}
	var authArgs []string
	switch {
	case o.token != "" && (o.user != "" || o.password != ""):
		t.Fatalf("testserver: NATS takes a Token or a Password, not both")
	case o.token != "":
		authArgs = []string{"--auth", o.token}
	case o.user != "" || o.password != "":
		authArgs = []string{"--user", o.user, "--pass", o.password}
	}
	version, err := natsServerVersion(bin)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	bin = natsOnClock(t, bin, version, o.clock)
	dir := dataDir(t, "nats")
	s := &NATSServer{version: version}
	startRetrying(t, "nats-server", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.Process = newProcess(t, procSpec{
			name: "nats-server",
			path: bin,
			args: slices.Concat([]string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir}, authArgs, o.args),
			env:  o.clock.env(),
			dir:  dir,
			port: port,
			ping: func(ctx context.Context) error { return natsPingAs(ctx, addr, auth) },
		})
		return s.start()
	})
	return s
}

// natsOnClock returns bin, or with a clock a build of the same version
// whose time.Now reads it (goClockBinary): nats-server times message TTLs
// by its wall clock.
func natsOnClock(t testing.TB, bin, version string, c *FakeClock) string {
	t.Helper()
	if c == nil {
		return bin
	}
	fake, err := goClockBinary("github.com/nats-io/nats-server/v2", "v"+version, "nats-server")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return fake
}

func natsServerVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", bin, err, out)
	}
	// "nats-server: v2.15.2"
	s := strings.TrimSpace(string(out))
	if i := strings.LastIndex(s, " "); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimPrefix(s, "v"), nil
}

// natsPing speaks the text protocol: CONNECT, PING -> PONG, and one
// JetStream API request ($JS.API.INFO) that must be answered, so JetStream
// is up too. It gives no credentials.
func natsPing(ctx context.Context, addr string) error { return natsPingAs(ctx, addr, natsAuth{}) }

// natsPingAs is natsPing with the credentials of auth in the CONNECT.
func natsPingAs(ctx context.Context, addr string, auth natsAuth) error {
	reply, err := natsRequestAs(ctx, addr, auth, "$JS.API.INFO", "")
	if err != nil {
		return err
	}
	if strings.Contains(reply, `"error"`) {
		return fmt.Errorf("nats: JetStream: %s", reply)
	}
	return nil
}

// natsRequest sends one request on subject with payload, after CONNECT
// (no credentials) and a PING that must be answered, and returns the
// reply's payload.
func natsRequest(ctx context.Context, addr, subject, payload string) (string, error) {
	return natsRequestAs(ctx, addr, natsAuth{}, subject, payload)
}

// natsRequestAs is natsRequest with the credentials of auth in the
// CONNECT.
func natsRequestAs(ctx context.Context, addr string, auth natsAuth, subject, payload string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "INFO ") {
		return "", fmt.Errorf("nats: greeting %q, want INFO", strings.TrimSpace(line))
	}
	connect, err := json.Marshal(struct {
		Verbose  bool `json:"verbose"`
		Pedantic bool `json:"pedantic"`
		Protocol int  `json:"protocol"`
		natsAuth
	}{Protocol: 1, natsAuth: auth})
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(conn, "CONNECT "+string(connect)+"\r\n"+
		"SUB _INBOX.testserver 1\r\n"+
		fmt.Sprintf("PUB %s _INBOX.testserver %d\r\n%s\r\n", subject, len(payload), payload)+
		"PING\r\n")
	if err != nil {
		return "", err
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	gotPong, reply := false, ""
	for gotReply := false; !gotPong || !gotReply; {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("nats: got PONG %v, an answer to %s %v: %v", gotPong, subject, gotReply, err)
		}
		switch f := strings.Fields(line); {
		case len(f) == 0:
		case f[0] == "PONG":
			gotPong = true
		case f[0] == "PING":
			_, _ = io.WriteString(conn, "PONG\r\n")
		case f[0] == "-ERR":
			return "", fmt.Errorf("nats: %s", strings.TrimSpace(line))
		case f[0] == "MSG" && len(f) >= 4:
			n, _ := strconv.Atoi(f[len(f)-1])
			b := make([]byte, n+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return "", err
			}
			reply, gotReply = strings.TrimSpace(string(b)), true
		}
	}
	return reply, nil
}

// versionAtLeast compares dotted versions numerically ("2.9.10" < "2.11").
func versionAtLeast(have, want string) bool {
	h := strings.Split(strings.TrimPrefix(have, "v"), ".")
	w := strings.Split(strings.TrimPrefix(want, "v"), ".")
	for i := range max(len(h), len(w)) {
		var hv, wv int
		if i < len(h) {
			hv, _ = strconv.Atoi(strings.SplitN(h[i], "-", 2)[0])
		}
		if i < len(w) {
			wv, _ = strconv.Atoi(strings.SplitN(w[i], "-", 2)[0])
		}
		if hv != wv {
			return hv > wv
		}
	}
	return true
}
