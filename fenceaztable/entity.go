package fenceaztable

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

// The entity of a key, as properties of the Table service:
//
//	PartitionKey  PartitionKey(key)
//	RowKey        "lock"
//	Key           the key itself
//	Token         Edm.Int64: the last token issued for the key (the counter)
//	Owner         the holder's owner id; "" while the key is free
//	TTLms         Edm.Int64: the holder's TTL in milliseconds
//	Meta          the holder's metadata, JSON; absent if none
//	DelayMs       Edm.Int64: the holder's lock-delay in milliseconds;
//	              absent if none
//	Released      the owner id of the holder whose Release freed the key
//	Write         random, new with every write: tells whether a write
//	              whose answer was lost landed (an extend changes no
//	              other property)
//
// Every write of fence replaces the whole entity, conditional on the ETag
// it read (or, for the first, only if there is none), so every property
// changes only together with the others and with the ETag.
type entity struct {
	key      string
	token    int64
	owner    string
	ttl      time.Duration
	delay    time.Duration
	meta     map[string]string
	released string
	write    string
}

// maxMeta bounds the holder's metadata, as JSON: the service keeps a
// string property of up to 64 KiB of UTF-16, which 32,000 bytes of UTF-8
// never exceed.
const maxMeta = 32000

// marshal returns the entity as the JSON the SDK sends.
func (e *entity) marshal() ([]byte, error) {
	m := map[string]any{
		"PartitionKey":     PartitionKey(e.key),
		"RowKey":           rowKey,
		"Key":              e.key,
		"Token":            strconv.FormatInt(e.token, 10),
		"Token@odata.type": "Edm.Int64",
		"Owner":            e.owner,
		"TTLms":            strconv.FormatInt(e.ttl.Milliseconds(), 10),
		"TTLms@odata.type": "Edm.Int64",
	}
	if e.delay > 0 {
		m["DelayMs"] = strconv.FormatInt(e.delay.Milliseconds(), 10)
		m["DelayMs@odata.type"] = "Edm.Int64"
	}
	if len(e.meta) > 0 {
		js, err := json.Marshal(e.meta)
		if err != nil {
			return nil, fmt.Errorf("holder metadata: %w", err)
		}
		if len(js) > maxMeta {
			return nil, fmt.Errorf("%w: the holder's metadata takes %d bytes as JSON; a table entity keeps %d",
				fence.ErrInvalidOption, len(js), maxMeta)
		}
		m["Meta"] = string(js)
	}
	if e.released != "" {
		m["Released"] = e.released
	}
	if e.write != "" {
		m["Write"] = e.write
	}
	return json.Marshal(m)
}

// ttlMillis returns ttl in whole milliseconds, rounded up: the store never
// keeps a lease for less than the Client counts on.
func ttlMillis(ttl time.Duration) time.Duration {
	return (ttl + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// delayMillis returns req's lock-delay (locks only) in whole
// milliseconds, rounded up: the store never keeps it shorter than asked.
func delayMillis(req fence.Request) time.Duration {
	if req.Kind != fence.KindLock || req.LockDelay <= 0 {
		return 0
	}
	return ttlMillis(req.LockDelay)
}

// parseEntity reads an entity as the SDK returns it. Int64 properties come
// as strings (OData JSON); numbers are accepted too. A missing or bad
// Token leaves token 0: the counter is lost, and the next token comes from
// the clock alone.
func parseEntity(b []byte) (entity, error) {
	var raw struct {
		Key      string          `json:"Key"`
		Token    json.RawMessage `json:"Token"`
		Owner    string          `json:"Owner"`
		TTLms    json.RawMessage `json:"TTLms"`
		DelayMs  json.RawMessage `json:"DelayMs"`
		Meta     string          `json:"Meta"`
		Released string          `json:"Released"`
		Write    string          `json:"Write"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return entity{}, fmt.Errorf("reading the entity: %w", err)
	}
	e := entity{key: raw.Key, owner: raw.Owner, released: raw.Released, write: raw.Write}
	if n, ok := int64Prop(raw.Token); ok && n > 0 {
		e.token = n
	}
	if n, ok := int64Prop(raw.TTLms); ok && n > 0 {
		e.ttl = time.Duration(n) * time.Millisecond
	}
	if n, ok := int64Prop(raw.DelayMs); ok && n > 0 {
		e.delay = time.Duration(n) * time.Millisecond
	}
	e.meta = metajson.Decode(raw.Meta)
	return e, nil
}

func int64Prop(v json.RawMessage) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// holdFor returns how long a contender must see the entity unchanged
// before its lease is over: the holder's TTL, or fallback for an entity
// that names a holder but no TTL (written by something other than fence).
func (e *entity) holdFor(fallback time.Duration) time.Duration {
	if e.ttl > 0 {
		return e.ttl
	}
	return fallback
}

// blockFor returns how long a contender must see the entity unchanged
// before the key is free: holdFor, then the holder's lock-delay.
func (e *entity) blockFor(fallback time.Duration) time.Duration {
	if testHookDelay == "ignore-delay" {
		return e.holdFor(fallback)
	}
	return e.holdFor(fallback) + e.delay
}

// held reports whether the entity names a holder.
func (e *entity) held() bool { return e.owner != "" }

// holder describes the entity's holder; expiresIn is what is left of its
// lease as the Store watched it.
func (e *entity) holder(key string, expiresIn time.Duration) fence.Holder {
	return fence.Holder{Key: key, Owner: e.owner, Token: e.token, ExpiresIn: expiresIn, Meta: e.meta}
}

// nextToken returns the token the next acquisition of an entity issues:
// one more than its counter, and at least the store's clock in
// microseconds (at the second's resolution of the HTTP Date header). The
// counter grows by one per acquisition, far slower than the clock's
// million a second, so the clock seed keeps tokens increasing when the
// counter is lost: the entity deleted (by an operator, a script, a table
// dropped and made again), its Token overwritten, an older copy restored.
// The one assumption: the store's clock does not go back, and a counter is
// not lost within the second it was last written (see docs/aztable.md).
func nextToken(counter int64, now *time.Time) (int64, error) {
	var seed int64 = 1
	if now != nil {
		seed = max(seed, now.Unix()*1e6)
	}
	if counter == 1<<63-1 {
		return 0, fmt.Errorf("token counter exhausted")
	}
	return max(counter+1, seed), nil
}

// serverDate returns the Date header of a response: the store's clock.
func serverDate(resp *http.Response) *time.Time {
	if resp == nil {
		return nil
	}
	t, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return nil
	}
	return &t
}

// odataETag returns the ETag a query response gives an entity in its
// "odata.etag" property (the same as a read's ETag header).
func odataETag(b []byte) (azcore.ETag, bool) {
	var raw struct {
		ETag string `json:"odata.etag"`
	}
	if json.Unmarshal(b, &raw) != nil || raw.ETag == "" {
		return "", false
	}
	return azcore.ETag(raw.ETag), true
}
