package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
)

// hint returns what the user can do about err, or "" if fence cannot
// tell. The error's own text says what happened; the hint says where to
// look.
func hint(err error) string {
	addr := "the store's address"
	var se *storeError
	if errors.As(err, &se) && se.host != "" {
		addr = se.host
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		addr = op.Addr.String()
	}
	var (
		dns      *net.DNSError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		recordH  tls.RecordHeaderError
	)
	var me *metricsError
	var ue *usageError
	switch {
	case errors.As(err, &me):
		return me.hint()
	case errors.As(err, &ue) && ue.hint != "":
		return ue.hint
	case errors.Is(err, fence.ErrInvalidKey):
		return fmt.Sprintf("a key is any non-empty UTF-8 text without NUL bytes, at most %d bytes", fence.MaxKeyLen)
	case errors.Is(err, fence.ErrInvalidTTL):
		return fmt.Sprintf("--ttl must be at least %v, and long enough for fence to renew every TTL/3 with time to spare: seconds to minutes, e.g. --ttl 30s", fence.MinTTL)
	case errors.As(err, &dns):
		switch {
		case dns.IsNotFound:
			return fmt.Sprintf("the host name %q does not resolve (DNS): check the host in --store or FENCE_STORE", dns.Name)
		case dns.IsTimeout:
			return fmt.Sprintf("looking up %q timed out: check the DNS resolver (/etc/resolv.conf) and the network", dns.Name)
		}
		return fmt.Sprintf("cannot look up %q (DNS): check the host in --store and the resolver", dns.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing accepts connections at %s: is the store's server running there, and is the port right?", addr)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("no route to %s: check the host in --store and this machine's network", addr)
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return "the store's TLS certificate was not accepted: check the host name in --store, and the CA this machine trusts"
	case errors.As(err, &recordH):
		return fmt.Sprintf("the server at %s does not speak TLS: use the store's plain URL scheme, or the TLS port", addr)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Sprintf("the server at %s closed the connection: is that port the store's, and do TLS settings match on both sides?", addr)
	case timedOut(err):
		return fmt.Sprintf("no answer from %s in time: the host may be down or overloaded, or a firewall drops the packets; check the address, then retry", addr)
	case errors.Is(err, syscall.EROFS):
		return "the store's directory is on a read-only file system: choose another with --store"
	case errors.Is(err, syscall.ENOTDIR):
		return "--store must name a directory (fence creates it if it is missing), not a file"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the store's file system is full: free some space, or choose another directory with --store"
	case errors.Is(err, fs.ErrPermission):
		return "fence needs to create, read and write files in the store's directory: check its owner and mode, or choose another with --store"
	case errors.Is(err, fence.ErrUnsupported):
		return "this store cannot do that; see its page in docs/ for what it offers"
	case se != nil && se.open && se.host != "":
		// The driver's client library did not say why; these are the
		// usual reasons.
		return fmt.Sprintf("check that the store's server runs at %s, that this machine can reach it, and the credentials (--store or FENCE_STORE)", se.host)
	}
	return ""
}

func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errorText returns err's message without the "fence: " prefix; for a
// store value of none of the accepted forms, it ends with where to find
// them all.
func errorText(err error) string {
	s := trimFence(err.Error())
	var ue *storeurl.URLError
	if errors.As(err, &ue) && ue.Want != "" {
		s += `; "fence help" lists all`
	}
	return s
}
