package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis key layout. Pattern keys use a hash tag ({...}) so that the two
// keys of one pattern live in one cluster slot, as a Lua script needs.
const (
	redisStatePrefix    = "loopguard:s:"
	redisGlobalPrefix   = "loopguard:g:{"
	redisIncidentPrefix = "loopguard:gi:{"
	// redisMaxRetries bounds optimistic retries of one Update. One agent's
	// requests are sequential, so real conflicts are rare; the bound only
	// matters under a burst on one key, and the timeout bounds it anyway.
	redisMaxRetries = 64
	// redisGlobalMembers bounds the sessions kept per pattern.
	redisGlobalMembers = 1000
)

// RedisStore keeps states in redis as JSON under "loopguard:s:<key>" with a
// TTL, so that several replicas share sessions. Update is optimistic
// (WATCH/MULTI/EXEC) with bounded retries. Every call is bounded by the
// store timeout, after which it fails with a context deadline error.
type RedisStore struct {
	client  redis.UniversalClient
	ttl     time.Duration
	timeout time.Duration
}

var (
	_ Store          = (*RedisStore)(nil)
	_ GlobalRecorder = (*RedisStore)(nil)
)

// NewRedisStore connects lazily to the redis deployment cfg names:
// RedisURL ("redis://[user:password@]host:port/db", "rediss://..." for TLS,
// or "unix://...") alone is one server; with RedisAddrs the URL's host and
// those addresses are the nodes of a Redis Cluster, or, with RedisMaster,
// the Sentinels that name that master. The URL's scheme, user, password and
// db apply to every node; RedisPasswordEnv, when set, names the environment
// variable holding the password instead, which must then be set. TTL and
// StoreTimeout of zero mean their defaults. It does not dial: an
// unreachable server shows as errors of later calls, which policy turns into
// fail-open decisions. Close releases the connections.
func NewRedisStore(cfg Config) (*RedisStore, error) {
	cfg = cfg.withDefaults()
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("policy: redis_url %q: %w", redactURL(cfg.RedisURL), err)
	}
	if cfg.RedisPasswordEnv != "" {
		pw := os.Getenv(cfg.RedisPasswordEnv)
		if pw == "" {
			return nil, fmt.Errorf("policy: redis_password_env: the environment variable %s is not set", cfg.RedisPasswordEnv)
		}
		opt.Password = pw
	}
	timeout := cfg.StoreTimeout
	u := &redis.UniversalOptions{
		Addrs:      append([]string{opt.Addr}, cfg.RedisAddrs...),
		MasterName: cfg.RedisMaster,
		Username:   opt.Username,
		Password:   opt.Password,
		DB:         opt.DB,
		TLSConfig:  opt.TLSConfig,
		// A cluster is named by its nodes; one node plus RedisAddrs makes
		// two or more, but say it outright so that the client kind never
		// depends on how many addresses are listed.
		IsClusterMode: len(cfg.RedisAddrs) > 0 && cfg.RedisMaster == "",
		// Every call carries a context deadline; these make go-redis honour
		// it on the socket rather than waiting its own 3s defaults.
		ContextTimeoutEnabled: true,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		// go-redis retries failed commands by default; a retry cannot fit in
		// a 50ms budget and would only delay failing open.
		MaxRetries: -1,
		// Likewise one dial per attempt: a down server must cost one refused
		// connection per request, not five spaced 100ms apart.
		DialerRetries: 1,
	}
	if opt.Network == "unix" {
		if len(u.Addrs) > 1 || u.MasterName != "" {
			return nil, errors.New("policy: redis_url: a unix:// socket cannot be combined with redis_addrs or redis_master")
		}
		so := u.Simple()
		so.Network = "unix"
		return &RedisStore{client: redis.NewClient(so), ttl: cfg.TTL, timeout: timeout}, nil
	}
	return &RedisStore{client: redis.NewUniversalClient(u), ttl: cfg.TTL, timeout: timeout}, nil
}

// Close closes the connection pool.
func (s *RedisStore) Close() error { return s.client.Close() }

// Ping checks that the server answers within the store timeout.
func (s *RedisStore) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.client.Ping(ctx).Err()
}

// Load implements Store.
func (s *RedisStore) Load(ctx context.Context, key string) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.client.Get(ctx, redisStatePrefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("load session: %w", err)
	}
	return decodeState(b)
}

// Update implements Store. fn may run several times when other replicas
// update key concurrently.
func (s *RedisStore) Update(ctx context.Context, key string, fn func(*State) error) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rkey := redisStatePrefix + key
	var out State
	txf := func(tx *redis.Tx) error {
		var st State
		b, err := tx.Get(ctx, rkey).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return err
		default:
			if st, err = decodeState(b); err != nil {
				// A state that does not decode (written by an incompatible
				// version) is replaced rather than wedging the session.
				st = State{}
			}
		}
		if err := fn(&st); err != nil {
			return fnError{err}
		}
		enc, err := json.Marshal(&st)
		if err != nil {
			return fnError{err}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, rkey, enc, s.ttl)
			return nil
		})
		if err == nil {
			out = st
		}
		return err
	}
	for attempt := 0; attempt < redisMaxRetries; attempt++ {
		err := s.client.Watch(ctx, txf, rkey)
		if err == nil {
			return out, nil
		}
		var fe fnError
		if errors.As(err, &fe) {
			return State{}, fe.error
		}
		if !errors.Is(err, redis.TxFailedErr) {
			return State{}, fmt.Errorf("update session: %w", err)
		}
		// Lost a race: back off a little, with jitter, so that the
		// contenders spread out instead of colliding again.
		d := time.Duration(rand.Int64N(int64(time.Millisecond) * int64(min(attempt+1, 8))))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return State{}, fmt.Errorf("update session: %w", ctx.Err())
		case <-t.C:
		}
	}
	return State{}, ErrConflict
}

// fnError carries an error of the caller's fn through go-redis unchanged.
type fnError struct{ error }

func (e fnError) Unwrap() error { return e.error }

// recordScript adds the session to the pattern's sorted set (score: time in
// ms), drops members older than the window, and sets the incident flag the
// first time the distinct sessions reach the threshold in a window.
var recordScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - window))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[5]) - 1)
redis.call('PEXPIRE', KEYS[1], window)
local n = redis.call('ZCARD', KEYS[1])
local first = 0
if n >= tonumber(ARGV[4]) then
  if redis.call('SET', KEYS[2], '1', 'NX', 'PX', window) then first = 1 end
end
return {n, first}
`)

// RecordPattern implements GlobalRecorder with one atomic script call.
func (s *RedisStore) RecordPattern(ctx context.Context, pattern, session string, at time.Time, window time.Duration, threshold int) (int, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys := []string{redisGlobalPrefix + pattern + "}", redisIncidentPrefix + pattern + "}"}
	res, err := recordScript.Run(ctx, s.client, keys,
		at.UnixMilli(), max(window.Milliseconds(), 1), session, threshold, redisGlobalMembers).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("record pattern: %w", err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("record pattern: unexpected reply of %d values", len(res))
	}
	return int(res[0]), res[1] == 1, nil
}

func decodeState(b []byte) (State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("decode session state: %w", err)
	}
	return st, nil
}
