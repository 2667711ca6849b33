package testserver

import (
	"runtime"
	"strings"
	"testing"
)

// The credential options make the servers refuse clients without them, and
// the readiness checks give them (the servers started at all).

func TestNATSCredentials(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opt     Option
		right   natsAuth
		refused []natsAuth
	}{
		{Token("s3cret-token"), natsAuth{Token: "s3cret-token"},
			[]natsAuth{{}, {Token: "wrong"}, {User: "u", Password: "s3cret-token"}}},
		{Password("fence", "s3cret-pw"), natsAuth{User: "fence", Password: "s3cret-pw"},
			[]natsAuth{{}, {User: "fence", Password: "wrong"}, {User: "other", Password: "s3cret-pw"}, {Token: "s3cret-pw"}}},
	} {
		n := NATS(t, c.opt)
		ctx := testContext(t)
		if err := natsPingAs(ctx, n.Addr(), c.right); err != nil {
			t.Fatalf("CONNECT with %+v: %v", c.right, err)
		}
		for _, auth := range c.refused {
			if err := natsPingAs(ctx, n.Addr(), auth); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
				t.Errorf("CONNECT with %+v: %v; want Authorization Violation", auth, err)
			}
		}
	}
}

func TestRedisPassword(t *testing.T) {
	t.Parallel()
	r := Redis(t, Password("", "s3cret-pw"))
	ctx := testContext(t)
	if v, err := r.do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING with the password = %v, %v", v, err)
	}
	if _, err := redisDo(ctx, r.Addr(), "PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v; want NOAUTH", err)
	}
	if _, err := redisDoAs(ctx, r.Addr(), "wrong", "PING"); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("PING with a wrong password: %v; want WRONGPASS", err)
	}
}

// With both passwords, the replica syncs and the two Sentinels find each
// other through the master (WaitReady checks it), and every server refuses
// a client without its password.
func TestRedisSentinelPasswords(t *testing.T) {
	t.Parallel()
	s := RedisSentinel(t, 1, 2, Password("", "data-pw"), SentinelPassword("sentinel-pw"))
	ctx := testContext(t)
	for _, addr := range append(s.SentinelAddrs(), s.Nodes[0].Addr(), s.Nodes[1].Addr()) {
		if _, err := redisDo(ctx, addr, "PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("PING %s without a password: %v; want NOAUTH", addr, err)
		}
	}
	for _, sn := range s.Sentinels {
		if _, err := redisDoAs(ctx, sn.Addr(), "data-pw", "PING"); err == nil {
			t.Errorf("sentinel %s took the data servers' password", sn.Addr())
		}
	}
	if _, err := redisDoAs(ctx, s.Master().Addr(), "sentinel-pw", "PING"); err == nil {
		t.Errorf("the master took the Sentinels' password")
	}
}

func TestCredentialOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		start func(tb *fatalTB)
		want  string
	}{
		{"redis token", func(tb *fatalTB) { Redis(tb, Token("x")) }, "Redis takes no Token"},
		{"redis user", func(tb *fatalTB) { Redis(tb, Password("u", "x")) }, "Redis takes no Password with a user name"},
		{"cluster", func(tb *fatalTB) { RedisCluster(tb, 3, Password("", "x")) }, "RedisCluster takes no Password"},
		{"nats sentinel", func(tb *fatalTB) { NATS(tb, SentinelPassword("x")) }, "NATS takes no SentinelPassword"},
		{"nats both", func(tb *fatalTB) { NATS(tb, Token("x"), Password("u", "p")) }, "not both"},
		{"redises net", func(tb *fatalTB) { Redises(tb, 1, OnNet(&Net{})) }, "Redises takes no OnNet"},
		{"redis cluster net", func(tb *fatalTB) { RedisCluster(tb, 3, OnNet(&Net{})) }, "RedisCluster takes no OnNet"},
		{"postgres net", func(tb *fatalTB) { Postgres(tb, OnNet(&Net{})) }, "Postgres takes no OnNet"},
		{"etcd clock", func(tb *fatalTB) { Etcd(tb, Clock(&FakeClock{})) }, "EtcdCluster takes no Clock"},
	} {
		tb := &fatalTB{recordingTB{TB: t}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.start(tb)
		}()
		<-done
		if !strings.Contains(tb.fatal, c.want) {
			t.Errorf("%s: the start failed with %q; want %q", c.name, tb.fatal, c.want)
		}
	}
}

// fatalTB ends the goroutine at Fatalf, as testing.T does, having recorded
// the message.
type fatalTB struct{ recordingTB }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.recordingTB.Fatalf(format, args...)
	runtime.Goexit()
}
