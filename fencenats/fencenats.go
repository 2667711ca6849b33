// Package fencenats is a fence driver on a NATS JetStream key-value bucket:
// create-if-absent to acquire, update with the expected revision to
// extend, delete with the expected revision to release; the token is the
// revision the create returned.
//
// Every lock key is one KV key; its value names the holder:
//
//	{"key": ..., "owner": ..., "ttl_ms": ..., "meta": {...}}
//
// Keys are escaped into valid KV keys (letters, digits, "-", "_" and "/"
// kept; every other byte, "." and "=" included, becomes "=XX"), so every
// lock key is one subject token; keys whose escaped form would be longer
// than 1024 bytes are shortened to a readable prefix, "==" and the hex
// SHA-256 of the key, and the full key is kept in the value.
//
// # Protocol
//
//   - TryAcquire publishes the holder's value on the key's subject with
//     "expected last subject sequence 0" (the key has no message at all)
//     and the lease TTL: one round trip when the key is free and clean. If
//     the key has a message, it reads it: a value means the key is held (a
//     *fence.HeldError with the holder); a delete or expiry marker means it
//     is free, and the publish is retried once expecting that marker's
//     revision. Either way, exactly one publish can win.
//   - Extend publishes the value again expecting the revision of our last
//     write: it succeeds only if nobody wrote the key since, and it re-arms
//     the TTL. If the reply to an earlier extend was lost, the driver reads
//     the key and carries on from a value that still names this owner.
//   - Release purges the key expecting our last revision; the purge marker
//     itself expires after the bucket's marker TTL, so nothing piles up.
//   - Waiters (fence.Watcher) watch the key and are woken by every delete,
//     purge or expiry marker.
//
// # Tokens
//
// The token is the revision (stream sequence) of the create. A stream's
// sequence only grows: a delete, a purge, an expiry (with its marker) and
// a server restart never bring it back, so tokens grow across every
// acquisition of a key (and of every key of the bucket). A deleted and
// re-created bucket would start again at 1; when this driver creates the
// bucket it starts the stream's sequence at the current time in
// microseconds, so tokens stay greater than those of any earlier bucket
// of that name, as long as the clock of the machine that re-creates it
// has not gone back.
//
// # Expiry
//
// With nats-server 2.11 or newer the driver creates buckets with
// per-message TTLs (and limit markers), and every acquire and extend sets
// the message's TTL to the lease TTL, rounded up to whole seconds (the
// server's granularity; at least 1s). An expired key leaves a marker, which
// wakes waiters. On older servers, or with a bucket created without
// per-message TTLs, the bucket's max age is every lease's TTL: shorter
// TTLs are granted the max age, longer ones are refused, and waiters learn
// of an expiry by polling at the reported expiry time.
//
// # Lock-delay
//
// With per-message TTLs the driver keeps a lease's lock-delay
// (fence.LockDelayer): the lease's message lives for its TTL plus the
// delay, rounded up to whole seconds, and its own end is judged by the
// server's write times; see lockdelay.go. A max-age bucket cannot.
package fencenats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/keyenc"
)

// DefaultBucket is the bucket a Store uses when the caller names none.
const DefaultBucket = "fence"

// Store is a fence.Driver on a JetStream KV bucket. It is safe for
// concurrent use.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's stream, for raw reads
	bucket string
	pre    string        // subject prefix of the bucket's keys
	perKey bool          // per-message TTLs
	maxAge time.Duration // the bucket's max age, if any
	marker time.Duration // TTL of purge markers (per-key mode)
	nc     *nats.Conn    // closed by Close, if the driver dialled it

	// cfg is the bucket's stream as New found or made it: a bucket
	// deleted behind the driver's back is made again so (recreate).
	cfg jetstream.StreamConfig
}

var (
	_ fence.Driver    = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Lister    = (*Store)(nil)

	_ fence.LockDelayer = (*Store)(nil)
)

// Option configures New.
type Option func(*options)

type options struct {
	replicas int
	storage  jetstream.StorageType
	maxAge   time.Duration
	marker   time.Duration
}

// WithReplicas sets the number of replicas of a bucket the driver creates.
// Default 1.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithMemoryStorage makes a bucket the driver creates keep its data in
// memory instead of on disk. A server restart then loses the bucket and
// its sequence; see the package doc about tokens.
func WithMemoryStorage() Option { return func(o *options) { o.storage = jetstream.MemoryStorage } }

// WithBucketMaxAge makes a bucket the driver creates expire keys by its
// max age instead of per-message TTLs, for servers older than 2.11: every
// lease then has this TTL in the store.
func WithBucketMaxAge(d time.Duration) Option { return func(o *options) { o.maxAge = d } }

// WithMarkerTTL sets how long the delete markers of released and expired
// keys stay in a bucket the driver creates (with per-message TTLs).
// Default 1s, the server's minimum.
func WithMarkerTTL(d time.Duration) Option { return func(o *options) { o.marker = d } }

// New returns a Store over the KV bucket named bucket, creating it if it
// does not exist (see the options for how). The caller keeps ownership of
// js's connection.
func New(ctx context.Context, js jetstream.JetStream, bucket string, opts ...Option) (*Store, error) {
	o := options{replicas: 1, storage: jetstream.FileStorage, marker: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = createBucket(ctx, js, bucket, o)
	}
	if err != nil {
		return nil, fmt.Errorf("fencenats: bucket %q: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencenats: bucket %q: %w", bucket, err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	d := &Store{js: js, kv: kv, bucket: bucket, pre: "$KV." + bucket + ".", perKey: cfg.AllowMsgTTL,
		maxAge: cfg.MaxAge, marker: max(cfg.SubjectDeleteMarkerTTL, time.Second), cfg: cfg}
	if !d.perKey && d.maxAge <= 0 {
		return nil, fmt.Errorf("fencenats: bucket %q has neither per-message TTLs nor a max age: its keys would never expire "+
			"(nats-server %s; per-message TTLs need 2.11 or newer: upgrade, or create the bucket with WithBucketMaxAge)",
			bucket, js.Conn().ConnectedServerVersion())
	}
	if d.stream, err = js.Stream(ctx, cfg.Name); err != nil {
		return nil, fmt.Errorf("fencenats: bucket %q: %w", bucket, err)
	}
	if cfg.MaxMsgsPerSubject != 1 {
		return nil, fmt.Errorf("fencenats: bucket %q keeps %d revisions per key; fence needs a bucket with history 1", bucket, cfg.MaxMsgsPerSubject)
	}
	return d, nil
}

// Dial connects to the NATS server at url and returns a Store on bucket
// that owns the connection: Close closes it.
func Dial(ctx context.Context, url, bucket string, opts ...Option) (*Store, error) {
	nc, err := nats.Connect(url, nats.Name("fence"))
	if err != nil {
		return nil, fmt.Errorf("fencenats: connect: %w", err) // the URL may hold credentials
	}
	js, err := jetstream.New(nc)
	if err == nil {
		var d *Store
		if d, err = New(ctx, js, bucket, opts...); err == nil {
			d.nc = nc
			return d, nil
		}
	}
	nc.Close()
	return nil, err
}

// Close closes the NATS connection if the driver dialled it (Dial).
func (d *Store) Close() error {
	if d.nc != nil {
		d.nc.Close()
	}
	return nil
}

// KeyValue returns the driver's bucket.
func (d *Store) KeyValue() jetstream.KeyValue { return d.kv }

// createBucket creates the bucket's stream the way the KV API does, but
// with its sequence starting at the current time in microseconds, so that
// a re-created bucket never issues a token below one its predecessor did.
func createBucket(ctx context.Context, js jetstream.JetStream, bucket string, o options) (jetstream.KeyValue, error) {
	cfg := jetstream.StreamConfig{
		Name:              "KV_" + bucket,
		Subjects:          []string{"$KV." + bucket + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           o.storage,
		Replicas:          o.replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
		Duplicates:        2 * time.Minute,
	}
	if o.maxAge > 0 {
		cfg.MaxAge = o.maxAge
		cfg.Duplicates = min(cfg.Duplicates, o.maxAge)
	} else {
		cfg.AllowMsgTTL = true
		cfg.SubjectDeleteMarkerTTL = o.marker
	}
	if err := createStream(ctx, js, cfg); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, bucket)
}

// createStream creates a bucket's stream as cfg says, its sequence
// starting at the current time in microseconds: above every token of an
// earlier stream of that name, whose sequence started at its own creation
// time and grew by one a message, far slower than the clock (the one
// assumption: the clock of the machine that creates it was not set back).
// Another driver's creating it first is no error.
func createStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	cfg.FirstSeq = uint64(time.Now().UnixMicro())
	if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return err
	}
	return nil
}

// names escapes keys into valid KV keys that are a single subject token.
var names = keyenc.New('=', keyenc.Alnum("-_/"))

// maxName bounds an escaped key: a NATS subject travels in a protocol
// line, 4 KB by default.
const maxName = 1024

// Name returns the KV key under which key's lease is kept: the escaped
// key, or, when that is longer than maxName, as much of it as fits before
// "==" and the hex SHA-256 of the key.
func (d *Store) Name(key string) string {
	if names.EncodedLen(key) <= maxName {
		return names.Encode(key)
	}
	sum := sha256.Sum256([]byte(key))
	return names.EncodePrefix(key, maxName-2-2*len(sum)) + "==" + hex.EncodeToString(sum[:])
}

// value is a lease as stored.
type value struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	TTLms int64  `json:"ttl_ms"`
	// Token is the create's revision, written by extends; the create
	// itself cannot know it, and is its own revision.
	Token int64             `json:"token,omitempty"`
	Meta  map[string]string `json:"meta,omitempty"`
	// DelayMs is the lease's lock-delay (lockdelay.go); its TTLms is
	// then the lease's own TTL, and the message's TTL is longer.
	DelayMs int64 `json:"delay_ms,omitempty"`
	// EndedMs, on a lease kept in its lock-delay, is the lease's end in
	// the server's Unix milliseconds.
	EndedMs int64 `json:"ended_ms,omitempty"`
}

// storeTTL is the TTL the store gives a lease of ttl: whole seconds,
// rounded up (per-message TTLs), or the bucket's max age.
func (d *Store) storeTTL(ttl time.Duration) (time.Duration, error) {
	if !d.perKey {
		if ttl > d.maxAge {
			return 0, fmt.Errorf("%w: %v is longer than the bucket's max age %v, every lease's TTL in this bucket",
				fence.ErrInvalidTTL, ttl, d.maxAge)
		}
		return d.maxAge, nil
	}
	return max(time.Second, (ttl+time.Second-1)/time.Second*time.Second), nil
}

// publish writes the lease value on key's subject, only if the subject's
// last message has revision expected (0: no message).
func (d *Store) publish(ctx context.Context, name string, v []byte, expected uint64, ttl time.Duration) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(expected)}
	if d.perKey {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	ack, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: d.pre + name, Data: v}, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// wrongRevision reports a failed compare on the subject's last revision.
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// TryAcquire implements fence.Driver.
func (d *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	return d.acquisition(ctx, req, func(ctx context.Context) (fence.Claim, error) { return d.tryAcquire(ctx, req) })
}

func (d *Store) tryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if req.LockDelay > 0 {
		return d.acquireDelayed(ctx, req)
	}
	ttl, err := d.storeTTL(req.TTL)
	if err != nil {
		return nil, err
	}
	name := d.Name(req.Key)
	v, _ := json.Marshal(value{Key: req.Key, Owner: req.Owner, TTLms: ttl.Milliseconds(), Meta: req.Meta})
	rev, err := d.create(ctx, req, name, v, ttl)
	if err != nil {
		return nil, err
	}
	return &claim{d: d, key: req.Key, name: name, owner: req.Owner, value: v, token: int64(rev), rev: rev, ttl: req.TTL}, nil
}

// create publishes v on the key's subject if the key is free, with the
// message TTL ttl, and returns the revision.
func (d *Store) create(ctx context.Context, req fence.Request, name string, v []byte, ttl time.Duration) (uint64, error) {
	expected := uint64(0)
	for attempt := 0; ; attempt++ {
		rev, err := d.publish(ctx, name, v, expected, ttl)
		if err == nil {
			return rev, nil
		}
		if !wrongRevision(err) {
			return 0, fmt.Errorf("fencenats: acquire %q: %w", req.Key, err)
		}
		m, live, err := d.last(ctx, name)
		switch {
		case err != nil:
			return 0, fmt.Errorf("fencenats: acquire %q: %w", req.Key, err)
		case live:
			// Held. (Never overwrite a value, even one that looks
			// expired by the clocks: only the server expires it.)
			held := &fence.HeldError{Key: req.Key}
			if h, ok := holder(req.Key, m); ok {
				held.Holder = &h
			}
			return 0, held
		case m != nil:
			expected = m.Sequence // a delete, purge or expiry marker: free
		default:
			expected = 0 // the marker just expired
		}
		if attempt == 2 {
			// Others keep changing the key under us: report it held.
			return 0, &fence.HeldError{Key: req.Key}
		}
	}
}

// last returns the key's last message (nil if it has none) and whether
// it is a live value rather than a delete, purge or expiry marker.
func (d *Store) last(ctx context.Context, name string) (*jetstream.RawStreamMsg, bool, error) {
	m, err := d.stream.GetLastMsgForSubject(ctx, d.pre+name)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	live := m.Header.Get("KV-Operation") == "" && m.Header.Get(jetstream.MarkerReasonHeader) == ""
	return m, live, nil
}

// holder describes a live lease message. ExpiresIn is the time until the
// key is free (the message's TTL, or else the bucket's max age in the
// value, after the server's write time, by this machine's clock): a hint
// for waiters, never used for validity.
func holder(key string, m *jetstream.RawStreamMsg) (fence.Holder, bool) {
	var v value
	if json.Unmarshal(m.Data, &v) != nil {
		return fence.Holder{Key: key}, false
	}
	if key == "" {
		key = v.Key
	}
	token := v.Token
	if token == 0 {
		token = int64(m.Sequence)
	}
	life := time.Duration(v.TTLms) * time.Millisecond
	if ttl, err := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader)); err == nil {
		life = ttl
	}
	return fence.Holder{
		Key: key, Owner: v.Owner, Token: token, Meta: v.Meta,
		ExpiresIn: max(time.Millisecond, life-time.Since(m.Time)),
	}, true
}

// Watch implements fence.Watcher: a KV watch on the key that signals every
// delete, purge and expiry marker.
func (d *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	w, err := d.kv.Watch(ctx, d.Name(key), jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("fencenats: watch %q: %w", key, err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() == jetstream.KeyValuePut {
					continue
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, nil
}

// Inspect implements fence.Inspector.
func (d *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	m, live, err := d.last(ctx, d.Name(key))
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencenats: inspect %q: %w", key, err)
	}
	if !live {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	h, _ := holder(key, m)
	return h, nil
}

// List implements fence.Lister. It reads every key of the bucket.
func (d *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	lister, err := d.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencenats: list: %w", err)
	}
	defer lister.Stop()
	var keys []string
	for n := range lister.Keys() {
		keys = append(keys, n)
	}
	var hs []fence.Holder
	for _, n := range keys {
		if dec, err := names.Decode(n); err == nil && !strings.HasPrefix(dec, prefix) {
			continue // a key that is not shortened tells its name
		}
		m, live, err := d.last(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("fencenats: list: %w", err)
		}
		if !live {
			continue // released meanwhile
		}
		h, ok := holder("", m)
		if !ok || !strings.HasPrefix(h.Key, prefix) {
			continue
		}
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}
