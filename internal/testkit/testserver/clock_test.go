package testserver

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFakeClock: a PostgreSQL and a redis-server started on a FakeClock
// read the moved wall clock at once, forward and back; a jump with no
// server on the clock is an error.
func TestFakeClock(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(t)
	if err := c.Jump(time.Hour); err == nil {
		t.Fatal("Jump before any server runs on the clock succeeded; want an error")
	}
	pg := Postgres(t, Clock(c))
	r := Redis(t, Clock(c))
	my := MariaDB(t, Clock(c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	since := func(what string, us string, err error) time.Duration {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", what, us, err)
		}
		return time.UnixMicro(n).Sub(time.Now()).Round(time.Minute)
	}
	skews := map[string]func() time.Duration{
		"postgres clock_timestamp()": func() time.Duration {
			rows, err := pgQuery(ctx, pg.Addr(), pg.Database(), "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
			if err != nil {
				return since("clock_timestamp", "", err)
			}
			return since("clock_timestamp", rows[0][0], nil)
		},
		"mariadb NOW(6)": func() time.Duration {
			rows, err := myQuery(ctx, my.Addr(), "", "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
			if err != nil {
				return since("NOW(6)", "", err)
			}
			return since("NOW(6)", rows[0][0], nil)
		},
		"redis TIME": func() time.Duration {
			v, err := redisDo(ctx, r.Addr(), "TIME")
			if err != nil {
				return since("TIME", "", err)
			}
			tv, ok := v.([]any)
			if !ok || len(tv) != 2 {
				t.Fatalf("TIME answered %v", v)
			}
			sec, _ := strconv.ParseInt(fmt.Sprint(tv[0]), 10, 64)
			usec, _ := strconv.ParseInt(fmt.Sprint(tv[1]), 10, 64)
			return since("TIME", strconv.FormatInt(sec*1000000+usec, 10), nil)
		},
	}
	eachJump(t, c, 0, func(step jumpStep) {
		for name, skew := range skews {
			if got := skew(); got != step.want || c.Offset() != step.want {
				t.Errorf("after a jump of %v: %s is %v from the real clock, Offset %v; want %v", step.jump, name, got, c.Offset(), step.want)
			}
		}
	})
}

// TestFakeClockNodeAndJava: Azurite's blob and table services and
// dynalite (node programs) and ZooKeeper (a Java one) read the moved wall
// clock too, forward and back: the Date header of the node servers'
// answers (node's HTTP server keeps its text for up to a second, so each
// look waits that out first), and the time ZooKeeper says a new
// session was established.
func TestFakeClockNodeAndJava(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dated := func(url string) func() (time.Time, error) {
		return func() (time.Time, error) {
			var date string
			_, err := httpGet(ctx, url, func(resp *http.Response) error {
				date = resp.Header.Get("Date")
				return nil
			})
			if date == "" {
				return time.Time{}, fmt.Errorf("no Date header: %v", err)
			}
			return http.ParseTime(date)
		}
	}
	zk := ZooKeeper(t, Clock(c))
	clocks := map[string]func() (time.Time, error){
		"azurite-blob":  dated(Azurite(t, Clock(c)).BlobURL() + "?comp=list"),
		"azurite-table": dated("http://" + AzuriteTable(t, Clock(c)).Addr() + "/" + AzuriteAccount + "/Tables"),
		"dynalite":      dated(Dynalite(t, Clock(c)).Endpoint() + "/"),
		"zookeeper":     func() (time.Time, error) { return zkEstablished(ctx, zk.Addr()) },
	}
	eachJump(t, c, 1100*time.Millisecond, func(step jumpStep) {
		for name, clock := range clocks {
			at, err := clock()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := time.Until(at).Round(time.Minute); got != step.want {
				t.Errorf("after a jump of %v: %s's clock is %v from the real clock; want %v", step.jump, name, got, step.want)
			}
		}
	})
}

// zkEstablished opens a ZooKeeper session at addr (a bare connect request,
// 10 s timeout, no password) and returns the time the server says it was
// established (the "est" of its "cons" line, by the server's wall clock).
func zkEstablished(ctx context.Context, addr string) (time.Time, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	req := binary.BigEndian.AppendUint32(make([]byte, 4), 0) // length, then protocol version 0
	req = binary.BigEndian.AppendUint64(req, 0)              // last zxid seen
	req = binary.BigEndian.AppendUint32(req, 10000)          // session timeout, ms
	req = binary.BigEndian.AppendUint64(req, 0)              // session id: a new one
	req = binary.BigEndian.AppendUint32(req, 16)             // password
	req = append(req, make([]byte, 16)...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := conn.Write(req); err != nil {
		return time.Time{}, err
	}
	if _, err := conn.Read(make([]byte, 64)); err != nil { // the session
		return time.Time{}, err
	}
	out, err := zkFourLetter(ctx, addr, "cons")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, conn.LocalAddr().String()+"[") {
			continue
		}
		_, rest, ok := strings.Cut(line, "est=")
		ms, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			break
		}
		return time.UnixMilli(n), nil
	}
	return time.Time{}, fmt.Errorf("no established time for %s in cons: %s", conn.LocalAddr(), out)
}

// TestFakeClockGo: a nats-server started on a FakeClock is a build of its
// own whose time.Now reads the clock (goClockBinary): the time JetStream
// stamps on a stored message moves with it, forward and back. The same
// server started without a clock keeps the real time.
func TestFakeClockGo(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	onClock, plain := NATS(t, Clock(c)), NATS(t)
	for _, s := range []*NATSServer{onClock, plain} {
		if _, err := natsRequest(ctx, s.Addr(), "$JS.API.STREAM.CREATE.CLOCK", `{"name":"CLOCK","subjects":["clock"],"storage":"memory"}`); err != nil {
			t.Fatal(err)
		}
	}
	eachJump(t, c, 0, func(step jumpStep) {
		for _, s := range []struct {
			name string
			srv  *NATSServer
			want time.Duration
		}{{"nats-server on the clock", onClock, step.want}, {"nats-server on the real clock", plain, 0}} {
			at, err := natsStoredAt(ctx, s.srv.Addr())
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if got := time.Until(at).Round(time.Minute); got != s.want {
				t.Errorf("after a jump of %v: %s stamps messages %v from the real clock; want %v", step.jump, s.name, got, s.want)
			}
		}
	})
}

// natsStoredAt publishes to the stream CLOCK at addr and returns the time
// the server stamped on the message it stored.
func natsStoredAt(ctx context.Context, addr string) (time.Time, error) {
	if _, err := natsRequest(ctx, addr, "clock", "now"); err != nil {
		return time.Time{}, err
	}
	reply, err := natsRequest(ctx, addr, "$JS.API.STREAM.MSG.GET.CLOCK", `{"last_by_subj":"clock"}`)
	if err != nil {
		return time.Time{}, err
	}
	var m struct {
		Message struct {
			Time time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(reply), &m); err != nil || m.Message.Time.IsZero() {
		return time.Time{}, fmt.Errorf("no stored message's time in %q: %v", reply, err)
	}
	return m.Message.Time, nil
}

// jumpStep is one step of eachJump: the jump made (none at first) and
// how far the clock then is from the real time.
type jumpStep struct{ jump, want time.Duration }

// eachJump moves c forward, back past the real time and forward to it
// again, and after each step (and once before any) waits settle and
// calls check.
func eachJump(t *testing.T, c *FakeClock, settle time.Duration, check func(step jumpStep)) {
	t.Helper()
	for _, step := range []jumpStep{
		{0, 0},
		{time.Hour, time.Hour},
		{-3 * time.Hour, -2 * time.Hour},
		{2 * time.Hour, 0},
	} {
		if step.jump != 0 {
			if err := c.Jump(step.jump); err != nil {
				t.Fatalf("Jump(%v): %v", step.jump, err)
			}
			time.Sleep(settle)
		}
		check(step)
	}
}
