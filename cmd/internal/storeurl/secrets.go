package storeurl

import (
	"net/url"
	"slices"
	"strings"
)

// redacted stands for a credential in what Redact returns.
const redacted = "xxxxx"

// Redact returns raw as a message may show it. A path is shown as it is.
// A URL is rebuilt from its parsed parts with each credential replaced by
// "xxxxx": the password of its user info; a user name that is a
// credential by itself (the token of nats://TOKEN@host); and the values
// of the query parameters its scheme takes credentials in (password= for
// every scheme, and per scheme e.g. sslpassword=, sentinel_password=, a
// SAS token's sig=), matched by exact name. Every other part (hosts,
// paths, other parameters) is shown as given. Of a URL of an unknown
// scheme, the whole user info and every parameter value are hidden. Of a
// value that does not parse as a URL, or that has an '@' after its host
// (a password with an unencoded '/', '?' or '#' that the parser cut),
// only the scheme is shown.
func Redact(raw string) string {
	if strings.HasPrefix(raw, "//") {
		// Not a path (Parse refuses it): a URL without its scheme.
		u, err := url.Parse(raw)
		if err != nil || misplacedAt(u) {
			return "//" + redacted
		}
		return redactURL(u)
	}
	if raw == "" || isPath(raw) {
		return raw
	}
	name, ok := schemeOf(raw)
	if !ok {
		// Neither a path nor a URL; what comes before an '@' may be
		// a user info (user:password@host without a scheme).
		return redactOpaque(raw)
	}
	u, err := url.Parse(raw)
	if err != nil || misplacedAt(u) {
		head := raw[:len(name)+1]
		if strings.HasPrefix(raw[len(head):], "//") {
			head += "//"
		}
		return head + redacted
	}
	out := redactURL(u)
	if head := raw[:len(name)+1]; strings.HasPrefix(raw, head+"//") && !strings.HasPrefix(out, head+"//") {
		out = head + "//" + out[len(head):] // "redis://" as given, not "redis:"
	}
	return out
}

// redactURL returns u as Redact shows it.
func redactURL(u *url.URL) string {
	s, known := lookup(u.Scheme)
	v := *u
	v.Opaque = redactOpaque(v.Opaque)
	if v.User != nil {
		_, hasPassword := v.User.Password()
		switch {
		case !known || (s.userIsSecret && !hasPassword):
			v.User = url.User(redacted)
		case hasPassword:
			v.User = url.UserPassword(v.User.Username(), redacted)
		}
	}
	v.RawQuery = redactQuery(v.RawQuery, func(name string) bool { return !known || s.isCredential(name) })
	if v.Fragment != "" {
		v.Fragment, v.RawFragment = redacted, ""
	}
	return v.String()
}

// isCredential reports whether the query parameter name carries a
// credential in URLs of s.
func (s scheme) isCredential(name string) bool {
	return strings.EqualFold(name, "password") ||
		slices.ContainsFunc(s.credentials, func(c string) bool { return strings.EqualFold(c, name) })
}

// redactQuery returns the raw query q with the value of every parameter
// whose (unescaped) name secret reports replaced, the rest as given.
// Parameters are separated by '&' or ';' (Go's parser refuses ';', other
// parsers split at it).
func redactQuery(q string, secret func(name string) bool) string {
	if q == "" {
		return q
	}
	var b strings.Builder
	for q != "" {
		end := strings.IndexAny(q, "&;")
		if end < 0 {
			end = len(q)
		}
		param := q[:end]
		rawName, _, _ := strings.Cut(param, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			name = rawName
		}
		if secret(name) {
			param = rawName + "=" + redacted
		}
		b.WriteString(param)
		if end < len(q) {
			b.WriteByte(q[end])
			end++
		}
		q = q[end:]
	}
	return b.String()
}

// redactOpaque hides what comes before the last '@' of s, a user info.
func redactOpaque(s string) string {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		return redacted + s[i:]
	}
	return s
}
