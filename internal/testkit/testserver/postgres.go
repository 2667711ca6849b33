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
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// PostgresServer is a private PostgreSQL cluster with trust authentication
// for user postgres and a database named test. Data survives Kill and
// Restart (fsync=off only matters if the machine itself crashes).
type PostgresServer struct {
	*Process
	db string
}

// DSN returns a URL for pgx and database/sql:
// "postgres://postgres@127.0.0.1:port/test?sslmode=disable".
func (s *PostgresServer) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), s.db)
}

// Database returns the name of the database DSN points at ("test").
func (s *PostgresServer) Database() string { return s.db }

// Postgres runs initdb into a fresh directory and starts a private postgres
// on a free loopback port (fsync=off, socket in its own directory), then
// creates database test. As root it runs initdb and postgres as the
// unprivileged postgres user (or nobody), since PostgreSQL refuses root.
func Postgres(t testing.TB, opts ...Option) *PostgresServer {
	t.Helper()
	o := collect(opts)
	o.check(t, "Postgres", credentials{clock: true})
	return startPostgres(t, o, 0)
}

// startPostgres is Postgres, on host of o.net if set (PostgresPair's
// node), its clients then let in from any address (trust).
func startPostgres(t testing.TB, o options, host int) *PostgresServer {
	t.Helper()
	bin := Require(t, "postgres")
	initdb := Require(t, "initdb")

	base := dataDir(t, "pg")
	cred, err := unprivileged(base)
	if err != nil {
		t.Fatalf("testserver: postgres: %v", err)
	}
	data := filepath.Join(base, "data")
	initLog := filepath.Join(t.TempDir(), "initdb.log")
	if err := runLogged(initLog, base, cred, initdb,
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if o.net != nil {
		// initdb lets in loopback only; the test's namespace reaches a
		// test host over the bridge, and so does the standby's host.
		if err := appendFile(filepath.Join(data, "pg_hba.conf"),
			"host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n"); err != nil {
			t.Fatalf("testserver: postgres: %v", err)
		}
	}

	s := &PostgresServer{db: "test"}
	startRetrying(t, "postgres", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		s.Process = newPostgresProcess(t, bin, base, data, cred, o, port, host)
		return s.start()
	})
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if _, err := pgQuery(ctx, s.Addr(), "postgres", "CREATE DATABASE "+s.db); err != nil {
		t.Fatalf("testserver: postgres on %s: create database: %v", s.Addr(), err)
	}
	return s
}

// newPostgresProcess prepares (does not start) a postgres on port with
// data directory data, its socket in base, run as cred, with o's clock
// and extra arguments, on host of o.net if set.
func newPostgresProcess(t testing.TB, bin, base, data string, cred *syscall.Credential, o options, port, host int) *Process {
	ip := memberIP(o.net, host)
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	args := []string{
		"-D", data,
		"-p", strconv.Itoa(port),
		"-k", base, // Unix socket directory: short, ours
		"-c", "listen_addresses=" + ip,
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "log_min_messages=warning",
	}
	args = append(args, o.args...)
	return newProcess(t, procSpec{
		name: "postgres",
		path: bin,
		args: args,
		dir:  base,
		cred: cred,
		env:  o.clock.env(),
		port: port,
		net:  o.net,
		host: host,
		// The whole old server is dead when this runs (Kill waits for
		// that), so its lock file is stale; if its pid were reused,
		// postgres could take it for a live postmaster and refuse.
		prestart: func() error {
			err := os.Remove(filepath.Join(data, "postmaster.pid"))
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		},
		ping: func(ctx context.Context) error {
			_, err := pgQuery(ctx, addr, "postgres", "SELECT 1")
			return err
		},
	})
}

// unprivileged returns the credential to run PostgreSQL with when the test
// runs as root (nil otherwise), and hands dir over to that user.
func unprivileged(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("running as root and found neither user postgres nor nobody to run postgres as: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// pgQuery connects as user postgres to database db with the simple query
// protocol (trust auth), runs one statement and returns its rows as text
// (NULL as ""). Enough for readiness and setup without a driver.
func pgQuery(ctx context.Context, addr, db, sql string) ([][]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	w := bufio.NewWriter(conn)
	r := bufio.NewReader(conn)

	// StartupMessage: length, protocol 3.0, key/value pairs, terminator.
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 196608)
	for _, kv := range [][2]string{{"user", "postgres"}, {"database", db}} {
		body = append(append(append(append(body, kv[0]...), 0), kv[1]...), 0)
	}
	body = append(body, 0)
	_ = binary.Write(w, binary.BigEndian, uint32(len(body)+4))
	w.Write(body)
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if _, err := pgReadUntilReady(r, nil); err != nil {
		return nil, err
	}

	w.WriteByte('Q')
	_ = binary.Write(w, binary.BigEndian, uint32(4+len(sql)+1))
	w.WriteString(sql)
	w.WriteByte(0)
	w.WriteByte('X') // Terminate after the answer
	_ = binary.Write(w, binary.BigEndian, uint32(4))
	if err := w.Flush(); err != nil {
		return nil, err
	}
	var rows [][]string
	_, err = pgReadUntilReady(r, &rows)
	return rows, err
}

// pgReadUntilReady reads backend messages up to ReadyForQuery, collecting
// data rows, and returns the first error the server reported.
func pgReadUntilReady(r *bufio.Reader, rows *[][]string) (bool, error) {
	var srvErr error
	for {
		typ, err := r.ReadByte()
		if err != nil {
			return false, err
		}
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			return false, err
		}
		if n < 4 || n > 1<<24 {
			return false, fmt.Errorf("postgres: bad message length %d", n)
		}
		msg := make([]byte, n-4)
		if _, err := io.ReadFull(r, msg); err != nil {
			return false, err
		}
		switch typ {
		case 'R': // Authentication
			if len(msg) < 4 {
				return false, errors.New("postgres: short auth message")
			}
			if code := binary.BigEndian.Uint32(msg); code != 0 {
				return false, fmt.Errorf("postgres: server asks for authentication (method %d); want trust", code)
			}
		case 'E':
			if srvErr == nil {
				srvErr = pgError(msg)
			}
			if rows == nil { // startup errors end the connection
				return false, srvErr
			}
		case 'D':
			if rows != nil {
				*rows = append(*rows, pgRow(msg))
			}
		case 'Z':
			return true, srvErr
		}
	}
}

func pgError(msg []byte) error {
	fields := map[byte]string{}
	for len(msg) > 1 {
		code := msg[0]
		end := 1
		for end < len(msg) && msg[end] != 0 {
			end++
		}
		fields[code] = string(msg[1:end])
		if end >= len(msg) {
			break
		}
		msg = msg[end+1:]
	}
	return fmt.Errorf("postgres: %s %s: %s", fields['S'], fields['C'], fields['M'])
}

func pgRow(msg []byte) []string {
	if len(msg) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(msg))
	msg = msg[2:]
	row := make([]string, 0, n)
	for range n {
		if len(msg) < 4 {
			break
		}
		l := int32(binary.BigEndian.Uint32(msg))
		msg = msg[4:]
		if l < 0 {
			row = append(row, "")
			continue
		}
		row = append(row, string(msg[:l]))
		msg = msg[l:]
	}
	return row
}

// appendFile appends text to the file at path, which must exist.
func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
