package main

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// credCase is a fence command line whose output, as text and as JSON,
// must not show any of secrets and must show each of shown as given.
type credCase struct {
	args    []string // without --json
	code    int
	secrets []string
	shown   []string
}

// check runs c twice, as text and with --json (after the subcommand),
// at the same time.
func (c credCase) check(t *testing.T, e *env) {
	t.Helper()
	var text, js result
	var wg sync.WaitGroup
	wg.Go(func() { text = e.run(c.args...) })
	wg.Go(func() { js = e.run(slices.Insert(slices.Clone(c.args), 1, "--json")...) })
	wg.Wait()
	name := strings.Join(c.args, " ")
	for _, r := range []struct {
		mode string
		r    result
		seen string // what a reader sees
	}{
		{"text", text, text.stdout + text.stderr},
		{"json", js, js.stdout + js.stderr + strings.Join(jsonStrings(t, js.stderr), "\n")},
	} {
		if r.r.code != c.code {
			t.Errorf("%s fence %s: exit %d, want %d:\n%s", r.mode, name, r.r.code, c.code, r.r.stderr)
		}
		for _, s := range c.secrets {
			if strings.Contains(r.seen, s) {
				t.Errorf("%s fence %s shows the credential %q:\n%s", r.mode, name, s, r.r.stderr)
			}
		}
		for _, s := range c.shown {
			if !strings.Contains(r.seen, s) {
				t.Errorf("%s fence %s does not show %q as given:\n%s", r.mode, name, s, r.r.stderr)
			}
		}
		if r.mode == "json" && r.r.stderr != "" && len(jsonStrings(t, r.r.stderr)) == 0 {
			t.Errorf("fence %s --json: stderr is not JSON:\n%s", name, r.r.stderr)
		}
	}
	t.Logf("fence %s:\n%s%s", name, text.stderr, js.stderr)
}

// jsonStrings decodes every line of out as a JSON object and returns the
// strings in it: what a program reading the JSON sees, escapes undone.
func jsonStrings(t *testing.T, out string) []string {
	t.Helper()
	var strs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			strs = append(strs, v)
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		walk(v)
	}
	return strs
}

// TestCredentialsBadParameter: a URL with a parameter its driver refuses
// is a usage error that shows the URL with its credentials hidden, and
// the parameter and every other part as given.
func TestCredentialsBadParameter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const pw = "s3cret-pw"
	status := func(store string) []string { return []string{"status", "--store", store, "--key", "k"} }
	for i, c := range []credCase{
		// A password "1" leaves 127.0.0.1 alone; token_retention is no
		// credential.
		{status("redis://:1@127.0.0.1:6379/0?token_retention=bogus"), 2, nil,
			[]string{`redis://:xxxxx@127.0.0.1:6379/0?token_retention=bogus`, `token_retention "bogus" is not a positive duration`}},
		{status("rediss://fence:" + pw + "@127.0.0.1:6380?token_retention=0s"), 2, []string{pw}, []string{`token_retention "0s"`}},
		{status("redis+cluster://:" + pw + "@127.0.0.1:1,127.0.0.1:2?prefix=a{b}"), 2, []string{pw}, []string{`prefix "a{b}"`, "127.0.0.1:1,127.0.0.1:2"}},
		{status("rediss+cluster://:" + pw + "@127.0.0.1:1?pool_size=many"), 2, []string{pw}, []string{"pool_size", "many"}},
		{status("redlock://:" + pw + "@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?token_retention=soon"), 2, []string{pw}, []string{`"soon"`}},
		{status("redis+sentinel://:" + pw + "@127.0.0.1:1/mymaster?sentinel_password=sentinel-pw&replica_only=true"), 2,
			[]string{pw, "sentinel-pw"}, []string{"replica_only", "mymaster"}},
		{status("rediss+sentinel://127.0.0.1:1/mymaster?password=" + pw + "&sentinel_password=sentinel-pw&route_randomly=1"), 2,
			[]string{pw, "sentinel-pw"}, []string{"route_randomly"}},
		{status("redis://u:" + pw + "@127.0.0.1:1/?password=" + pw), 2, []string{pw}, []string{"password"}},
		// postgres: the password three ways; table names and modes as given.
		{status("postgres://app:" + pw + "@127.0.0.1:1/db?password=pw2&sslpassword=pw3&tokens_table=t2&mode=bogus"), 2,
			[]string{pw, "pw2", "pw3"}, []string{"tokens_table=t2", `mode="bogus"`, "127.0.0.1:1"}},
		{status("postgresql://app:" + pw + "@127.0.0.1:1/db?sslpassword=pw3&connect_timeout=later"), 2,
			[]string{pw, "pw3"}, []string{"connect_timeout", `"later"`}},
		{status("postgres://app:" + pw + "@127.0.0.1:1/db?tokens_table=a%3Bb"), 2, []string{pw}, []string{"a;b"}},
		{status("mysql://app:" + pw + "@127.0.0.1:1/db?setup=maybe"), 2, []string{pw}, []string{`setup="maybe"`}},
		{status("mysql://app:" + pw + "@127.0.0.1:1/db?parseTime=maybe"), 2, []string{pw}, []string{"invalid bool value: maybe"}},
		{status("mysql://app@127.0.0.1:1/db?password=" + pw), 2, []string{pw}, []string{"user info"}},
		{status("etcd://root:" + pw + "@127.0.0.1:1/locks?dial_timeout=5s"), 2, []string{pw}, []string{"dial_timeout=5s", "no parameters"}},
		{status("zk://u:" + pw + "@127.0.0.1:1/locks"), 2, []string{pw}, []string{"no credentials"}},
		{status("zk://127.0.0.1:1/locks?session_timeout=bogus"), 2, nil, []string{`session_timeout "bogus"`}},
		// NATS: a user without a password is a token.
		{status("nats://tok-" + pw + "@127.0.0.1:1/locks?x=1"), 2, []string{pw}, []string{"nats://xxxxx@127.0.0.1:1/locks?x=1"}},
		{status("nats://u:" + pw + "@127.0.0.1:1/a.b"), 2, []string{pw}, []string{`bucket "a.b"`}},
		// Azure: the account key and a SAS token's signature.
		{status("azblob://acct:a2V5" + pw + "@acct.blob.core.windows.net/Bad_Name"), 2, []string{pw}, []string{`"Bad_Name"`}},
		{status("azblob://acct.blob.core.windows.net/Bad_Name?sv=2024-08-04&sp=rwc&sig=sig-" + pw), 2, []string{pw},
			[]string{"sv=2024-08-04&sp=rwc&sig=xxxxx"}},
		{status("azblob+http://acct:a2V5@127.0.0.1:1/acct/locks?sv=2024-08-04&sig=sig-" + pw), 2, []string{pw, "a2V5"},
			[]string{"not both"}},
		// Malformed: nothing but the scheme (a password with an unencoded
		// '/' is cut in two by the parser).
		{status("redis://u:pa/ss" + pw + "@127.0.0.1:6379"), 2, []string{"pa/ss", pw}, []string{"redis://xxxxx", "%2F"}},
		{status("redis:u:" + pw + "@127.0.0.1:6379"), 2, []string{pw}, []string{"redis:xxxxx@127.0.0.1:6379"}},
		{status("u:" + pw + "@127.0.0.1:6379"), 2, []string{pw}, []string{"u:xxxxx@127.0.0.1:6379"}},
		{[]string{"run", "--store", "redis://:" + pw + "@127.0.0.1:6379?prefix=a}", "--key", "k", "--", "true"}, 2, []string{pw}, []string{`"a}"`}},
		{[]string{"list", "--store", "postgres://app:" + pw + "@127.0.0.1:1/db?setup=maybe"}, 2, []string{pw}, []string{`"maybe"`}},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			c.check(t, &env{t: t, store: e.store, home: e.home})
		})
	}
}

// TestCredentialsUnreachable: a server that does not answer (a closed
// loopback port) is reported naming its address, without the
// credentials, for every store and credential form.
func TestCredentialsUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := testserver.ClosedAddr(t)
	const pw = "s3cret-pw"
	var cases []credCase
	for _, store := range []string{
		"redis://:" + pw + "@" + addr,
		"redis://fence:" + pw + "@" + addr + "/1?token_retention=1h",
		"rediss://fence:" + pw + "@" + addr,
		"redis+cluster://:" + pw + "@" + addr,
		"redlock://:" + pw + "@" + addr + "," + addr + "," + addr,
		"redis+sentinel://:" + pw + "@" + addr + "/mymaster?sentinel_password=sentinel-" + pw,
		"postgres://app:" + pw + "@" + addr + "/db?sslmode=disable&sslpassword=ssl-" + pw + "&tokens_table=t2",
		"postgres://app@" + addr + "/db?sslmode=disable&password=" + pw,
		"mysql://app:" + pw + "@" + addr + "/db",
		"nats://tok-" + pw + "@" + addr + "/locks",
		"nats://u:" + pw + "@" + addr + "/locks",
		"azblob+http://" + addr + "/devstoreaccount1/locks?sv=2024-08-04&sr=c&sp=rwc&sig=sig-" + pw,
		"azblob://" + addr + "/acct/locks?sv=2024-08-04&sig=sig-" + pw,
	} {
		cases = append(cases, credCase{[]string{"status", "--store", store, "--key", "k"}, 1, []string{pw}, []string{addr}})
	}
	// An account key is base64.
	cases = append(cases, credCase{[]string{"status", "--store", "azblob+http://devstoreaccount1:a2V5s3cretpwAAAA@" + addr + "/devstoreaccount1/locks", "--key", "k"},
		1, []string{"s3cretpw"}, []string{addr, "connection refused"}})
	// etcd, with run.
	cases = append(cases, credCase{[]string{"run", "--no-wait", "--store", "etcd://root:" + pw + "@" + addr + "/locks", "--key", "k", "--", "true"},
		1, []string{pw}, []string{addr}})
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			c.check(t, &env{t: t, store: e.store, home: e.home})
		})
	}
}

// TestCredentialsRefused: servers that refuse the credentials, where a
// private test server can: the error says so, without them.
//
// The credential forms covered here, by store: redis (a password alone, the
// default user's, a named user's), redis+cluster, redlock, redis+sentinel
// (the Sentinels' sentinel_password, the master's in the user info or as
// password=, each missing, each given to the other), postgres (the user
// info's, password=), mysql (over TCP and a socket), etcd, nats (a token,
// a user and password, each given to a server wanting the other), and the
// azblob credentials from the environment (AZURE_STORAGE_KEY,
// AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_CONNECTION_STRING; those in the
// URL are in TestAzblobStore). Not here: the TLS forms (rediss,
// rediss+cluster, rediss+sentinel), for want of a TLS test server; zk
// takes no credentials.
func TestCredentialsRefused(t *testing.T) {
	t.Parallel()
	const right, wrong = "right-pw", "wrong-pw"
	status := func(store string) []string { return []string{"status", "--store", store, "--key", "k"} }
	runTrue := func(store string) []string { return []string{"run", "--store", store, "--key", "k", "--", "true"} }

	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := testserver.Redis(t, testserver.Password("", right))
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: right})
		defer rdb.Close()
		if err := rdb.Do(t.Context(), "ACL", "SETUSER", "fenceapp", "on", ">"+right, "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		e := newEnv(t)
		a := srv.Addr()
		for _, c := range []struct{ store, shown string }{
			{"redis://:" + wrong + "@" + a, a},
			{"redis://default:" + wrong + "@" + a + "/0?token_retention=1h", "token_retention=1h"},
			{"redis://fenceapp:" + wrong + "@" + a, "fenceapp"},
			// The Cluster and Redlock forms, against a server that refuses
			// the password before anything else.
			{"redis+cluster://:" + wrong + "@" + a, a},
			{"redlock://fenceapp:" + wrong + "@" + a + "," + a + "," + a, "fenceapp"},
		} {
			credCase{status(c.store), 1, []string{wrong, right}, []string{"WRONGPASS", c.shown}}.check(t, e)
		}
		credCase{status("redis://" + a), 1, []string{right}, []string{"NOAUTH"}}.check(t, e)
		credCase{runTrue("redis://fenceapp:" + right + "@" + a), 0, []string{right}, nil}.check(t, e)
	})

	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		const sentinelRight, sentinelWrong = "sentinel-" + right, "sentinel-" + wrong
		rs := testserver.RedisSentinel(t, 1, 1, testserver.Password("", right), testserver.SentinelPassword(sentinelRight))
		e := newEnv(t)
		base := "redis+sentinel://" + rs.SentinelAddrs()[0] + "/" + rs.MasterName()
		with := func(userinfo, query string) string {
			return strings.Replace(base, "//", "//"+userinfo, 1) + query
		}
		secrets := []string{right, wrong, sentinelRight, sentinelWrong}
		sentinel := "Sentinel " + rs.SentinelAddrs()[0]
		master := `master "` + rs.MasterName() + `" at ` + rs.Master().Addr()
		for _, c := range []struct {
			store string
			shown []string
		}{
			// The Sentinel refuses its password, or wants one.
			{with(":"+right+"@", "?sentinel_password="+sentinelWrong), []string{sentinel, "WRONGPASS"}},
			{with(":"+right+"@", ""), []string{sentinel, "NOAUTH"}},
			{with("", "?sentinel_username=default&sentinel_password="+sentinelWrong+"&password="+right), []string{sentinel, "WRONGPASS", "sentinel_username=default"}},
			// The master refuses its password, given in the user info or
			// as password=, or wants one.
			{with(":"+wrong+"@", "?sentinel_password="+sentinelRight), []string{master, "WRONGPASS"}},
			{with("default:"+wrong+"@", "?sentinel_password="+sentinelRight), []string{master, "WRONGPASS"}},
			{with("", "?password="+wrong+"&sentinel_password="+sentinelRight), []string{master, "WRONGPASS"}},
			{with("", "?sentinel_password="+sentinelRight), []string{master, "NOAUTH"}},
			// The master's password given to the Sentinel, and the other
			// way round.
			{with(":"+sentinelRight+"@", "?sentinel_password="+right), []string{sentinel, "WRONGPASS"}},
		} {
			credCase{status(c.store), 1, secrets, c.shown}.check(t, e)
		}
		credCase{runTrue(with(":"+right+"@", "?sentinel_password="+sentinelRight)), 0, secrets, nil}.check(t, e)
		credCase{runTrue(with("", "?password="+right+"&sentinel_password="+sentinelRight)), 0, secrets, nil}.check(t, e)
	})

	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		tok := testserver.NATS(t, testserver.Token(right))
		up := testserver.NATS(t, testserver.Password("fence", right))
		e := newEnv(t)
		for _, c := range []struct{ store, shown string }{
			{"nats://" + wrong + "@" + tok.Addr() + "/locks", "nats://xxxxx@" + tok.Addr() + "/locks"},
			{"nats://" + tok.Addr() + "/locks", tok.Addr()},
			{"nats://fence:" + right + "@" + tok.Addr() + "/locks", "nats://fence:xxxxx@" + tok.Addr()},
			{"nats://fence:" + wrong + "@" + up.Addr() + "/locks", "nats://fence:xxxxx@" + up.Addr() + "/locks"},
			{"nats://" + right + "@" + up.Addr() + "/locks", "nats://xxxxx@" + up.Addr()},
			{"nats://" + up.Addr(), up.Addr()},
			// One server of two refuses: nats.go says what the last one
			// tried said.
			{"nats://" + wrong + "@" + tok.Addr() + "," + tok.Addr() + "/locks", tok.Addr()},
		} {
			credCase{status(c.store), 1, []string{wrong, right}, []string{"nats: Authorization Violation", c.shown}}.check(t, e)
		}
		credCase{runTrue("nats://" + right + "@" + tok.Addr() + "/locks"), 0, []string{right}, nil}.check(t, e)
		credCase{runTrue("nats://fence:" + right + "@" + up.Addr() + "/locks"), 0, []string{right}, nil}.check(t, e)
	})

	t.Run("azblob", func(t *testing.T) {
		t.Parallel()
		// The credentials the azblob URLs take from the environment (see
		// azblob_test.go for those in the URL).
		az := testserver.Azurite(t)
		wrongKey := base64.StdEncoding.EncodeToString([]byte("a wrong key of the right length for Azure Storage, 64 bytes long"))
		wrongSig := base64.StdEncoding.EncodeToString([]byte("a wrong signature, 32 bytes long"))
		store := "azblob+http://" + az.Addr() + "/" + testserver.AzuriteAccount + "/fence-env"
		conn := func(key string) string {
			return "DefaultEndpointsProtocol=http;AccountName=" + testserver.AzuriteAccount + ";AccountKey=" + key +
				";BlobEndpoint=http://" + az.Addr() + "/" + testserver.AzuriteAccount + ";"
		}
		secrets := []string{wrongKey, wrongKey[:20], wrongSig, url.QueryEscape(wrongSig), wrongSig[:20], testserver.AzuriteKey[:20]}
		for _, c := range []struct {
			environ []string
			store   string
		}{
			{[]string{"AZURE_STORAGE_KEY=" + wrongKey}, store},
			{[]string{"AZURE_STORAGE_SAS_TOKEN=?sv=2024-08-04&sr=c&sp=rwc&se=2030-01-01T00%3A00%3A00Z&sig=" + url.QueryEscape(wrongSig)}, store},
			{[]string{"AZURE_STORAGE_CONNECTION_STRING=" + conn(wrongKey)}, "azblob:///fence-env"},
		} {
			e := newEnv(t)
			e.environ = c.environ
			credCase{status(c.store), 1, secrets, []string{"403"}}.check(t, e)
		}
		e := newEnv(t)
		e.environ = []string{"AZURE_STORAGE_CONNECTION_STRING=" + conn(testserver.AzuriteKey)}
		credCase{runTrue("azblob:///fence-env"), 0, secrets, nil}.check(t, e)
	})

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// Password authentication for every user but postgres, whom the
		// test server's own checks connect as.
		dir, err := os.MkdirTemp("", "fence-hba-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		hba := filepath.Join(dir, "pg_hba.conf")
		if err := os.WriteFile(hba, []byte("local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		srv := testserver.Postgres(t, testserver.Args("-c", "hba_file="+hba))
		conn, err := pgx.Connect(ctx, srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, "CREATE ROLE fenceapp LOGIN PASSWORD '"+right+"'")
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t)
		base := "postgres://fenceapp:" + wrong + "@" + srv.Addr() + "/test?sslmode=disable"
		credCase{[]string{"status", "--store", base, "--key", "k"}, 1, []string{wrong, right}, []string{"password authentication failed", "fenceapp"}}.check(t, e)
		credCase{[]string{"status", "--store", "postgres://fenceapp@" + srv.Addr() + "/test?sslmode=disable&password=" + wrong + "&sslpassword=ssl-" + wrong, "--key", "k"},
			1, []string{wrong, right}, []string{"password authentication failed"}}.check(t, e)
		// A table that does not exist is named as given, even when the
		// password is a part of its name (trust auth for postgres).
		store := "postgres://postgres:tokens@" + srv.Addr() + "/test?sslmode=disable&mode=session&tokens_table=missing_tokens&setup=off"
		credCase{[]string{"run", "--no-wait", "--store", store, "--key", "k", "--", "true"}, 1, nil,
			[]string{`relation "missing_tokens" does not exist`, "postgres://postgres:xxxxx@"}}.check(t, e)
	})

	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dir, err := os.MkdirTemp("", "fence-my-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		socket := filepath.Join(dir, "mysqld.sock")
		srv := testserver.MariaDB(t, testserver.Args("--socket="+socket))
		db, err := sql.Open("mysql", srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, host := range []string{"127.0.0.1", "localhost", "%"} {
			if _, err := db.ExecContext(ctx, "CREATE USER 'fenceapp'@'"+host+"' IDENTIFIED BY '"+right+"'"); err != nil {
				t.Fatal(err)
			}
		}
		e := newEnv(t)
		credCase{[]string{"status", "--store", "mysql://fenceapp:" + wrong + "@" + srv.Addr() + "/test?timeout=5s", "--key", "k"}, 1,
			[]string{wrong, right}, []string{"Access denied", "fenceapp"}}.check(t, e)
		credCase{status("mysql://fenceapp:" + wrong + "@/test?socket=" + socket), 1,
			[]string{wrong, right}, []string{"Access denied", "fenceapp", socket}}.check(t, e)
	})

	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		srv := testserver.Etcd(t)
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for _, step := range []func() error{
			func() error { _, err := cli.UserAdd(ctx, "root", right); return err },
			func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
			func() error { _, err := cli.AuthEnable(ctx); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		e := newEnv(t)
		credCase{[]string{"status", "--store", "etcd://root:" + wrong + "@" + srv.Addr() + "/locks", "--key", "k"}, 1,
			[]string{wrong, right}, []string{"authentication failed", srv.Addr()}}.check(t, e)
	})
}
