package azkit

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencing/fence"
)

func respErr(status int, code string) error {
	return &azcore.ResponseError{StatusCode: status, ErrorCode: code}
}

// TestErrorHidesURL: a transport error names the operation and the cause,
// never the URL, whose query may carry a SAS signature.
func TestErrorHidesURL(t *testing.T) {
	ue := &url.Error{Op: "Put", URL: "https://a.blob.core.windows.net/c/b?sig=SECRET", Err: errors.New("connection refused")}
	got := Err("acquire", ue).Error()
	if strings.Contains(got, "SECRET") || got != "acquire: Put: connection refused" {
		t.Errorf("Err = %q, want the op and cause without the URL", got)
	}
	if !errors.Is(Err("x", ue), ue) {
		t.Error("Err does not unwrap to the SDK's error")
	}
}

func TestErrorNamesStatusAndCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{respErr(412, "ConditionNotMet"), "renew: 412 ConditionNotMet"},
		{respErr(503, ""), "renew: 503 Service Unavailable"},
		{errors.New("boom"), "renew: boom"},
	} {
		if got := Err("renew", c.err).Error(); got != c.want {
			t.Errorf("Err(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := Err("", respErr(404, "BlobNotFound")).Error(); got != "404 BlobNotFound" {
		t.Errorf("Err without op = %q", got)
	}
}

// TestStatusClasses: which answers mean the service changed nothing, and
// which mean the resource is not as the writer read it. Timeouts and
// throttling are neither: the write may still land.
func TestStatusClasses(t *testing.T) {
	for _, c := range []struct {
		status            int
		refused, conflict bool
	}{
		{http.StatusBadRequest, true, false},
		{http.StatusNotFound, true, true},
		{http.StatusConflict, true, true},
		{http.StatusPreconditionFailed, true, true},
		{http.StatusRequestTimeout, false, false},
		{http.StatusTooManyRequests, false, false},
		{http.StatusInternalServerError, false, false},
	} {
		err := Err("op", respErr(c.status, "X"))
		if Refused(err) != c.refused || Conflict(err) != c.conflict {
			t.Errorf("status %d: refused %v conflict %v, want %v %v", c.status, Refused(err), Conflict(err), c.refused, c.conflict)
		}
		if Status(err) != c.status || Code(err) != "X" {
			t.Errorf("status %d: Status %d Code %q", c.status, Status(err), Code(err))
		}
	}
	plain := errors.New("net down")
	if Refused(plain) || Conflict(plain) || Status(plain) != 0 || Code(plain) != "" {
		t.Error("a transport error is classed as a service answer")
	}
}

func TestNotHeld(t *testing.T) {
	cause := respErr(412, "UpdateConditionNotSatisfied")
	err := NotHeld("renew", cause)
	if !errors.Is(err, fence.ErrNotHeld) || !errors.Is(err, cause) {
		t.Errorf("NotHeld = %v: want ErrNotHeld and the cause in the chain", err)
	}
	if got := err.Error(); !strings.HasPrefix(got, "renew: ") || !strings.Contains(got, "412 UpdateConditionNotSatisfied") {
		t.Errorf("NotHeld message %q", got)
	}
}
