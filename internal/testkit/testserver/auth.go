package testserver

import "testing"

// Token makes nats-server require this token of every client (--auth); its
// readiness check gives it. Clients connect with nats://TOKEN@host.
func Token(token string) Option {
	return func(o *options) { o.token = token }
}

// Password makes the server require a password of every client, and its
// readiness checks give it:
//
//   - nats-server: the user and password (--user, --pass);
//   - redis-server (Redis, Redises): the default user's password
//     (requirepass), so user must be ""; clients connect with
//     redis://:PASSWORD@host or redis://default:PASSWORD@host;
//   - RedisSentinel: the same, for every data server; the replicas and
//     the Sentinels are given it (masterauth, sentinel auth-pass).
func Password(user, password string) Option {
	return func(o *options) { o.user, o.password = user, password }
}

// SentinelPassword makes the Sentinels of RedisSentinel require a password
// of every client (requirepass); they give it to one another, and their
// readiness checks give it. Clients name it in go-redis's
// FailoverOptions.SentinelPassword, or as fence's sentinel_password
// parameter.
func SentinelPassword(password string) Option {
	return func(o *options) { o.sentinelPassword = password }
}

// credentials is which of the credential options (Token, Password,
// SentinelPassword) a starter applies. The starters of the servers they
// name fail the test when given one they cannot apply, so that a test
// meaning to see credentials refused does not run against a server that
// takes anything. (The other starters ignore them.)
type credentials struct {
	token, user, password, sentinelPassword bool
	clock                                   bool // the Clock option
	net                                     bool // the OnNet option
}

// check fails the test if o asks for credentials that server cannot
// require.
func (o options) check(tb testing.TB, server string, can credentials) {
	tb.Helper()
	for _, c := range []struct {
		given, can bool
		name       string
	}{
		{o.token != "", can.token, "Token"},
		{o.user != "", can.user, "Password with a user name"},
		{o.password != "", can.password, "Password"},
		{o.sentinelPassword != "", can.sentinelPassword, "SentinelPassword"},
		{o.clock != nil, can.clock, "Clock"},
		{o.net != nil, can.net, "OnNet"},
	} {
		if c.given && !c.can {
			tb.Fatalf("testserver: %s takes no %s", server, c.name)
		}
	}
}
