package bench

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceaztable"
)

func aztableContenders(connStr string) []Contender {
	return []Contender{
		{Store: "aztable", Name: "fence", Role: RoleFence,
			Desc: "fenceaztable: one read + one replace If-Match (token = counter + 1), release one replace If-Match; waiters poll with the Client's backoff",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				t, closeFn, err := newAztable(connStr, rt)
				if err != nil {
					return nil, err
				}
				return &fenceClient{c: fence.New(fenceaztable.New(t), fence.WithTTL(TTL)), close: closeFn}, nil
			}},
		{Store: "aztable", Name: "raw", Role: RoleRaw,
			Desc: "one read + one insert or replace If-Match (token = counter + 1), release one replace If-Match; waiters poll every 5 to 50 ms",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				t, closeFn, err := newAztable(connStr, rt)
				if err != nil {
					return nil, err
				}
				return &rawAztableClient{t: t, close: closeFn}, nil
			}},
	}
}

// countingDoer counts the requests a table client sends.
type countingDoer struct {
	c  *http.Client
	rt *atomic.Int64
}

func (d countingDoer) Do(req *http.Request) (*http.Response, error) {
	d.rt.Add(1)
	return d.c.Do(req)
}

func newAztable(connStr string, rt *atomic.Int64) (*aztables.Client, func() error, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := fenceaztable.ClientOptions()
	opts.Transport = countingDoer{c: &http.Client{Transport: tr}, rt: rt}
	svc, err := aztables.NewServiceClientFromConnectionString(connStr, opts)
	if err != nil {
		return nil, nil, err
	}
	return svc.NewClient("bench"), func() error { tr.CloseIdleConnections(); return nil }, nil
}

// setupAztable creates the benchmark's table.
func setupAztable(ctx context.Context, connStr string) error {
	var rt atomic.Int64
	t, closeFn, err := newAztable(connStr, &rt)
	if err != nil {
		return err
	}
	defer closeFn()
	_, err = t.CreateTable(ctx, nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.ErrorCode == string(aztables.TableAlreadyExists) {
		err = nil
	}
	return err
}

// aztableVersion returns the version Azurite's Server header tells.
func aztableVersion(ctx context.Context, endpoint string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/Tables", nil)
	if err != nil {
		return "?"
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "?"
	}
	resp.Body.Close()
	if s := resp.Header.Get("Server"); s != "" {
		return s
	}
	return "?"
}

// raw: the entity of a key, read, then written If-Match on its ETag (or
// inserted if absent) with the counter bumped and an owner; released by a
// replace If-Match that clears the owner. No expiry: the benchmark's
// holders always release.

type rawAztableClient struct {
	t     *aztables.Client
	close func() error
}

func (r *rawAztableClient) Locker() Locker { return &rawAztableLocker{t: r.t} }
func (r *rawAztableClient) Close() error   { return r.close() }

type rawAztableLocker struct {
	t     *aztables.Client
	key   string
	token int64
	etag  azcore.ETag
}

type rawEntity struct {
	PartitionKey string `json:"PartitionKey"`
	RowKey       string `json:"RowKey"`
	Token        string `json:"Token"`
	TokenType    string `json:"Token@odata.type"`
	Owner        string `json:"Owner"`
}

func (r *rawAztableLocker) Lock(ctx context.Context, key string) error {
	pk := "raw-" + hex.EncodeToString([]byte(key)) // no '/' in a PartitionKey
	wait := 5 * time.Millisecond
	for {
		ok, err := r.try(ctx, pk)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait/2 + rand.N(wait/2)):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (r *rawAztableLocker) try(ctx context.Context, pk string) (bool, error) {
	resp, err := r.t.GetEntity(ctx, pk, "lock", nil)
	var re *azcore.ResponseError
	found := true
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		found, err = false, nil
	}
	if err != nil {
		return false, err
	}
	var cur rawEntity
	if found {
		if err := json.Unmarshal(resp.Value, &cur); err != nil {
			return false, err
		}
		if cur.Owner != "" {
			return false, nil
		}
	}
	n, _ := strconv.ParseInt(cur.Token, 10, 64)
	e := rawEntity{PartitionKey: pk, RowKey: "lock", Token: strconv.FormatInt(n+1, 10), TokenType: "Edm.Int64",
		Owner: fmt.Sprintf("%x", rand.Uint64())}
	b, _ := json.Marshal(e)
	var etag azcore.ETag
	if found {
		u, err := r.t.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: &resp.ETag, UpdateMode: aztables.UpdateModeReplace})
		if err != nil {
			if errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed {
				return false, nil
			}
			return false, err
		}
		etag = u.ETag
	} else {
		a, err := r.t.AddEntity(ctx, b, nil)
		if err != nil {
			if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
				return false, nil
			}
			return false, err
		}
		etag = a.ETag
	}
	r.key, r.token, r.etag = pk, n+1, etag
	return true, nil
}

func (r *rawAztableLocker) Unlock(ctx context.Context) error {
	e := rawEntity{PartitionKey: r.key, RowKey: "lock", Token: strconv.FormatInt(r.token, 10), TokenType: "Edm.Int64"}
	b, _ := json.Marshal(e)
	_, err := r.t.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: &r.etag, UpdateMode: aztables.UpdateModeReplace})
	return err
}
