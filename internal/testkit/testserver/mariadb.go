package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// MariaDBServer is a private MariaDB server where root connects over TCP with
// no password, with a database named test. Data survives Kill and Restart
// (InnoDB writes its log to the OS at each commit).
type MariaDBServer struct {
	*Process
	db string
}

// DSN returns a go-sql-driver/mysql DSN: "root@tcp(127.0.0.1:port)/test".
func (s *MariaDBServer) DSN() string {
	return fmt.Sprintf("root@tcp(%s)/%s", s.Addr(), s.db)
}

// URL returns "mysql://root@127.0.0.1:port/test", the form fence's --store
// flag takes.
func (s *MariaDBServer) URL() string {
	return fmt.Sprintf("mysql://root@%s/%s", s.Addr(), s.db)
}

// Database returns the name of the database DSN points at ("test").
func (s *MariaDBServer) Database() string { return s.db }

// MariaDB runs mariadb-install-db into a fresh directory and starts a private
// mariadbd on a free loopback port (no config files read, socket in its own
// directory), then creates database test.
func MariaDB(t testing.TB, opts ...Option) *MariaDBServer {
	t.Helper()
	bin := Require(t, "mariadbd")
	install := Require(t, "mariadb-install-db")
	o := collect(opts)
	o.check(t, "MariaDB", credentials{clock: true})

	base := dataDir(t, "mariadb")
	data := filepath.Join(base, "data")
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"} // mariadbd refuses root unless told
	}
	// A private tmpdir for the bootstrap too: in the shared /tmp, installs
	// running at once (go test runs packages in parallel) have failed on
	// each other's temporary tables ("Unknown table 'mysql.tmp_user_sys'").
	installArgs := append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, asRoot...)
	if err := runLogged(filepath.Join(t.TempDir(), "mariadb-install-db.log"), base, nil, install, installArgs...); err != nil {
		t.Fatalf("testserver: %v", err)
	}

	s := &MariaDBServer{db: "test"}
	startRetrying(t, "mariadbd", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := append([]string{
			"--no-defaults", // must come first
			"--datadir=" + data,
			"--tmpdir=" + tmp,
			"--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--socket=" + filepath.Join(base, "mysqld.sock"),
			"--pid-file=" + filepath.Join(base, "mysqld.pid"),
			"--skip-name-resolve",
			"--max-connections=300",
			"--innodb-buffer-pool-size=64M",
			"--innodb-flush-log-at-trx-commit=2", // survives a process kill, not a machine crash
			"--innodb-use-native-aio=0",          // io_setup limits bite with many servers
			"--skip-log-bin",
		}, asRoot...)
		args = append(args, o.args...)
		s.Process = newProcess(t, procSpec{
			name: "mariadbd",
			path: bin,
			args: args,
			dir:  base,
			env:  o.clock.env(),
			port: port,
			ping: func(ctx context.Context) error {
				_, err := myQuery(ctx, addr, "", "SELECT 1")
				return err
			},
		})
		return s.start()
	})
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if _, err := myQuery(ctx, s.Addr(), "", "CREATE DATABASE "+s.db); err != nil {
		t.Fatalf("testserver: mariadbd on %s: create database: %v", s.Addr(), err)
	}
	return s
}

// myQuery logs in as root with no password, runs one statement with the
// text protocol and returns its rows (NULL as ""). Enough for readiness and
// setup without a driver.
func myQuery(ctx context.Context, addr, db, sql string) ([][]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c := &myConn{r: bufio.NewReader(conn), w: conn}

	greeting, err := c.read()
	if err != nil {
		return nil, err
	}
	if len(greeting) > 0 && greeting[0] == 0xff {
		return nil, myError(greeting)
	}
	const (
		clientLongPassword   = 0x1
		clientConnectWithDB  = 0x8
		clientProtocol41     = 0x200
		clientTransactions   = 0x2000
		clientSecureConn     = 0x8000
		clientPluginAuth     = 0x80000
		utf8mb4GeneralCI     = 45
		maxPacket            = 1 << 24
		authPluginNativePass = "mysql_native_password"
	)
	caps := uint32(clientLongPassword | clientProtocol41 | clientTransactions | clientSecureConn | clientPluginAuth)
	if db != "" {
		caps |= clientConnectWithDB
	}
	var resp []byte
	resp = binary.LittleEndian.AppendUint32(resp, caps)
	resp = binary.LittleEndian.AppendUint32(resp, maxPacket)
	resp = append(resp, utf8mb4GeneralCI)
	resp = append(resp, make([]byte, 23)...)
	resp = append(append(resp, "root"...), 0)
	resp = append(resp, 0) // empty password: zero-length auth response
	if db != "" {
		resp = append(append(resp, db...), 0)
	}
	resp = append(append(resp, authPluginNativePass...), 0)
	if err := c.write(resp); err != nil {
		return nil, err
	}
	for {
		pkt, err := c.read()
		if err != nil {
			return nil, err
		}
		if len(pkt) == 0 {
			return nil, errors.New("mysql: empty packet during login")
		}
		switch pkt[0] {
		case 0x00: // OK: logged in
		case 0xff:
			return nil, myError(pkt)
		case 0xfe: // auth switch: the answer for an empty password is empty
			if err := c.write(nil); err != nil {
				return nil, err
			}
			continue
		default:
			return nil, fmt.Errorf("mysql: unexpected login packet 0x%02x", pkt[0])
		}
		break
	}

	defer func() { // COM_QUIT, so the server logs no aborted connection
		c.seq = 0
		_ = c.write([]byte{0x01})
	}()
	c.seq = 0
	if err := c.write(append([]byte{0x03}, sql...)); err != nil { // COM_QUERY
		return nil, err
	}
	pkt, err := c.read()
	if err != nil {
		return nil, err
	}
	switch {
	case len(pkt) == 0:
		return nil, errors.New("mysql: empty reply")
	case pkt[0] == 0x00:
		return nil, nil
	case pkt[0] == 0xff:
		return nil, myError(pkt)
	}
	ncols, _ := lenencInt(pkt)
	for range ncols + 1 { // column definitions, then EOF
		if _, err := c.read(); err != nil {
			return nil, err
		}
	}
	var rows [][]string
	for {
		pkt, err := c.read()
		if err != nil {
			return nil, err
		}
		if len(pkt) > 0 && pkt[0] == 0xff {
			return rows, myError(pkt)
		}
		if len(pkt) > 0 && pkt[0] == 0xfe && len(pkt) < 9 { // EOF
			return rows, nil
		}
		row := make([]string, 0, ncols)
		for len(pkt) > 0 {
			if pkt[0] == 0xfb { // NULL
				row = append(row, "")
				pkt = pkt[1:]
				continue
			}
			n, used := lenencInt(pkt)
			pkt = pkt[used:]
			if uint64(len(pkt)) < n {
				return rows, errors.New("mysql: short row")
			}
			row = append(row, string(pkt[:n]))
			pkt = pkt[n:]
		}
		rows = append(rows, row)
	}
}

type myConn struct {
	r   *bufio.Reader
	w   io.Writer
	seq byte
}

func (c *myConn) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	c.seq = hdr[3] + 1
	buf := make([]byte, n)
	_, err := io.ReadFull(c.r, buf)
	return buf, err
}

func (c *myConn) write(payload []byte) error {
	n := len(payload)
	pkt := append([]byte{byte(n), byte(n >> 8), byte(n >> 16), c.seq}, payload...)
	c.seq++
	_, err := c.w.Write(pkt)
	return err
}

func lenencInt(b []byte) (v uint64, used int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch {
	case b[0] < 0xfb:
		return uint64(b[0]), 1
	case b[0] == 0xfc && len(b) >= 3:
		return uint64(b[1]) | uint64(b[2])<<8, 3
	case b[0] == 0xfd && len(b) >= 4:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4
	case b[0] == 0xfe && len(b) >= 9:
		return binary.LittleEndian.Uint64(b[1:9]), 9
	}
	return 0, 1
}

func myError(pkt []byte) error {
	if len(pkt) < 3 {
		return errors.New("mysql: error packet")
	}
	code := binary.LittleEndian.Uint16(pkt[1:3])
	msg := pkt[3:]
	if len(msg) > 6 && msg[0] == '#' { // SQL state marker
		msg = msg[6:]
	}
	return fmt.Errorf("mysql: error %d: %s", code, msg)
}
