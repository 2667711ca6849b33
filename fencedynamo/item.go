package fencedynamo

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

// The item of a key, as DynamoDB attributes:
//
//	k         S: PartitionKey(key), the table's partition key
//	key       S: the key itself
//	token     N: the last token issued for the key (the counter)
//	owner     S: the holder's owner id; absent while the key is free
//	ttlms     N: the holder's TTL in milliseconds
//	meta      S: the holder's metadata, JSON; absent if none
//	delayms   N: the holder's lock-delay in milliseconds; absent if none
//	released  S: the owner id of the holder whose Release freed the key
//	rv        S: the record version, random, new with every write
//
// Every write of fence puts the whole item, conditional on the rv it read
// (or, for the first, only if there is no item), so every attribute
// changes only together with the others and with rv.
type item struct {
	key      string
	token    int64
	owner    string
	ttl      time.Duration
	delay    time.Duration
	meta     map[string]string
	released string
	rv       string
}

// Attribute names.
const (
	attrName     = "k"
	attrKey      = "key"
	attrToken    = "token"
	attrOwner    = "owner"
	attrTTL      = "ttlms"
	attrMeta     = "meta"
	attrDelay    = "delayms"
	attrReleased = "released"
	attrRV       = "rv"
)

// maxMeta bounds the holder's metadata, as JSON. An item keeps at most
// 400 KB, names and values together; the key takes up to 16 KiB twice.
const maxMeta = 300_000

// newRV returns a fresh record version.
func newRV() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkMeta fails on holder metadata that an item cannot keep.
func checkMeta(meta map[string]string) (string, error) {
	if len(meta) == 0 {
		return "", nil
	}
	js, err := json.Marshal(meta)
	if err != nil {
		return "", fmt.Errorf("holder metadata: %w", err)
	}
	if len(js) > maxMeta {
		return "", fmt.Errorf("%w: the holder's metadata takes %d bytes as JSON; an item keeps %d",
			fence.ErrInvalidOption, len(js), maxMeta)
	}
	return string(js), nil
}

// marshal returns the item as DynamoDB attributes.
func (it *item) marshal() (map[string]types.AttributeValue, error) {
	m := map[string]types.AttributeValue{
		attrName:  &types.AttributeValueMemberS{Value: PartitionKey(it.key)},
		attrKey:   &types.AttributeValueMemberS{Value: it.key},
		attrToken: &types.AttributeValueMemberN{Value: strconv.FormatInt(it.token, 10)},
		attrTTL:   &types.AttributeValueMemberN{Value: strconv.FormatInt(it.ttl.Milliseconds(), 10)},
		attrRV:    &types.AttributeValueMemberS{Value: it.rv},
	}
	if it.owner != "" {
		m[attrOwner] = &types.AttributeValueMemberS{Value: it.owner}
	}
	js, err := checkMeta(it.meta)
	if err != nil {
		return nil, err
	}
	if js != "" {
		m[attrMeta] = &types.AttributeValueMemberS{Value: js}
	}
	if it.delay > 0 {
		m[attrDelay] = &types.AttributeValueMemberN{Value: strconv.FormatInt(it.delay.Milliseconds(), 10)}
	}
	if it.released != "" {
		m[attrReleased] = &types.AttributeValueMemberS{Value: it.released}
	}
	return m, nil
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

// parseItem reads an item. A missing or bad token leaves token 0: the
// counter is lost, and the next token comes from the clock alone. An item
// without rv (written by something other than fence) reads with rv "",
// which no write of fence is conditioned on: fence replaces it only
// through the insert path's refusal, never silently.
func parseItem(m map[string]types.AttributeValue) item {
	it := item{key: str(m[attrKey]), owner: str(m[attrOwner]), released: str(m[attrReleased]), rv: str(m[attrRV])}
	if n, err := strconv.ParseInt(num(m[attrToken]), 10, 64); err == nil && n > 0 {
		it.token = n
	}
	if n, err := strconv.ParseInt(num(m[attrTTL]), 10, 64); err == nil && n > 0 {
		it.ttl = time.Duration(n) * time.Millisecond
	}
	if n, err := strconv.ParseInt(num(m[attrDelay]), 10, 64); err == nil && n > 0 {
		it.delay = time.Duration(n) * time.Millisecond
	}
	it.meta = metajson.Decode(str(m[attrMeta]))
	return it
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func num(v types.AttributeValue) string {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// holdFor returns how long a contender must see the item unchanged before
// its lease is over: the holder's TTL, or fallback for an item that names
// a holder but no TTL (written by something other than fence).
func (it *item) holdFor(fallback time.Duration) time.Duration {
	if it.ttl > 0 {
		return it.ttl
	}
	return fallback
}

// blockFor returns how long a contender must see the item unchanged
// before the key is free: holdFor, then the holder's lock-delay.
func (it *item) blockFor(fallback time.Duration) time.Duration {
	if testHookDelay == "ignore-delay" {
		return it.holdFor(fallback)
	}
	return it.holdFor(fallback) + it.delay
}

// held reports whether the item names a holder.
func (it *item) held() bool { return it.owner != "" }

// holder describes the item's holder; expiresIn is what is left of its
// lease as the Store watched it.
func (it *item) holder(key string, expiresIn time.Duration) fence.Holder {
	return fence.Holder{Key: key, Owner: it.owner, Token: it.token, ExpiresIn: expiresIn, Meta: it.meta}
}

// nextToken returns the token the next acquisition of an item issues: one
// more than its counter, and at least the store's clock in microseconds
// (at the second's resolution of the HTTP Date header). The counter grows
// by one per acquisition, far slower than the clock's million a second,
// so the clock seed keeps tokens increasing when the counter is lost: the
// item deleted (by an operator, a script, a table dropped and made
// again), its token overwritten, an older backup restored. The one
// assumption: the store's clock does not go back, and a counter is not
// lost within the second it was last written (see docs/dynamodb.md).
func nextToken(counter int64, now time.Time) (int64, error) {
	if counter == 1<<63-1 {
		return 0, fmt.Errorf("token counter exhausted")
	}
	return max(counter+1, now.Unix()*1e6, 1), nil
}

// serverDate returns the Date header of a response: the store's clock.
// Without it the token counter cannot be seeded, and the read fails.
func serverDate(h http.Header) (time.Time, error) {
	d := h.Get("Date")
	t, err := http.ParseTime(d)
	if err != nil {
		return time.Time{}, fmt.Errorf("the answer's Date header %q is not a time: the token counter cannot be seeded from the store's clock", d)
	}
	return t, nil
}
