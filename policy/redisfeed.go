package policy

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The admin feed that replicas share: one capped redis stream of
// content-free timeline entries (observe.Entry as JSON), each tagged with
// the process that wrote it. Its bounds keep redis memory flat: at most
// about RedisFeedLen entries, and the key expires when no replica writes
// for the store's TTL.
const (
	redisFeedKey = "loopguard:feed"
	// RedisFeedLen caps the stream (XADD MAXLEN ~): about 3 KB of redis
	// memory per entry at most, so some 30 MB at the cap.
	RedisFeedLen = 10000
)

// FeedMessage is one entry of the shared feed.
type FeedMessage struct {
	// ID is the stream id; Read resumes after it.
	ID string
	// Origin names the process that wrote the entry, so that a replica
	// skips its own.
	Origin string
	Data   []byte
}

// Publish appends entries, written by origin, to the shared feed in one
// round trip, trimming it to about RedisFeedLen entries. Like every call its
// socket reads and writes are bounded by the store timeout; ctx bounds the
// whole.
func (s *RedisStore) Publish(ctx context.Context, origin string, entries [][]byte) error {
	if len(entries) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range entries {
			p.XAdd(ctx, &redis.XAddArgs{Stream: redisFeedKey, MaxLen: RedisFeedLen, Approx: true,
				Values: []any{"o", origin, "e", e}})
		}
		p.PExpire(ctx, redisFeedKey, s.ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish feed: %w", err)
	}
	return nil
}

// Read returns up to limit feed entries after the stream id after ("" or
// "0": from the oldest kept), oldest first.
func (s *RedisStore) Read(ctx context.Context, after string, limit int) ([]FeedMessage, error) {
	start := "-"
	if after != "" && after != "0" {
		start = "(" + after
	}
	msgs, err := s.client.XRangeN(ctx, redisFeedKey, start, "+", int64(limit)).Result()
	if err != nil {
		return nil, fmt.Errorf("read feed: %w", err)
	}
	out := make([]FeedMessage, 0, len(msgs))
	for _, m := range msgs {
		o, _ := m.Values["o"].(string)
		e, _ := m.Values["e"].(string)
		out = append(out, FeedMessage{ID: m.ID, Origin: o, Data: []byte(e)})
	}
	return out, nil
}
