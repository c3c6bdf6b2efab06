package observe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
)

// SharedFeed carries timeline entries between replicas. policy.RedisStore
// implements it with a capped redis stream.
type SharedFeed interface {
	// Publish appends entries (Entry as JSON) written by origin.
	Publish(ctx context.Context, origin string, entries [][]byte) error
	// Read returns up to limit entries after the id after ("": the oldest
	// kept), oldest first.
	Read(ctx context.Context, after string, limit int) ([]policy.FeedMessage, error)
}

var _ SharedFeed = (*policy.RedisStore)(nil)

// Defaults of the cluster sync.
const (
	// DefaultClusterInterval is how often a replica publishes its new
	// entries and reads the others': the delay of the shared view.
	DefaultClusterInterval = 250 * time.Millisecond
	// clusterBatch bounds the entries moved per call.
	clusterBatch = 512
	// clusterTimeout bounds one Publish or Read; the sync runs beside the
	// requests, never on their path.
	clusterTimeout = 2 * time.Second
	// clusterRetry spaces the tries while the feed is down, so that an
	// outage costs a dial (and a go-redis log line) every few seconds, not
	// four a second.
	clusterRetry = 5 * time.Second
)

// Cluster keeps a Recorder in step with the other replicas' through a
// SharedFeed, so that the admin API and the dashboard of any replica show
// every replica's sessions, timelines, stats and live feed. Each replica
// publishes the entries it records and folds in those the others
// published. A replica that starts reads back what the feed still holds.
// When the feed fails, entries of that interval are dropped (the record is
// a view; the policy state is in the store) and the failure is logged once
// until it heals.
type Cluster struct {
	rec    *Recorder
	feed   SharedFeed
	log    zerolog.Logger
	origin string // this process, so that it skips its own entries

	seq   uint64 // the last of rec's entries published
	after string // the last feed id read
	down  bool   // the last sync failed
	tried time.Time

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// StartCluster starts syncing rec through feed every interval (0 means
// DefaultClusterInterval) until Close.
func StartCluster(rec *Recorder, feed SharedFeed, log zerolog.Logger, interval time.Duration) *Cluster {
	if interval <= 0 {
		interval = DefaultClusterInterval
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	c := &Cluster{rec: rec, feed: feed, log: log, origin: hex.EncodeToString(id[:]), seq: rec.Seq(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.run(interval)
	return c
}

// Close publishes what is left, stops the sync and waits for it.
func (c *Cluster) Close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

func (c *Cluster) run(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.publish() // the last entries, so that none is lost to a clean shutdown
			return
		case now := <-t.C:
			if c.down && now.Sub(c.tried) < clusterRetry {
				continue
			}
			c.tried = now
		}
		c.publish()
		c.read()
	}
}

// publish sends the entries this replica recorded since the last call.
func (c *Cluster) publish() {
	for {
		entries, seq := c.rec.Since(c.seq, clusterBatch)
		batch := make([][]byte, 0, len(entries))
		for i := range entries {
			if entries[i].remote {
				continue
			}
			if b, err := json.Marshal(&entries[i]); err == nil {
				batch = append(batch, b)
			}
		}
		c.seq = seq
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		err := c.feed.Publish(ctx, c.origin, batch)
		cancel()
		c.health(err)
		// On failure the batch is dropped: retrying would hold the view
		// back behind an outage, and the feed ring overwrites it anyway.
		if err != nil || len(entries) < clusterBatch {
			return
		}
	}
}

// read folds in the entries the other replicas published since the last call.
func (c *Cluster) read() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		msgs, err := c.feed.Read(ctx, c.after, clusterBatch)
		cancel()
		c.health(err)
		if err != nil {
			return
		}
		for _, m := range msgs {
			c.after = m.ID
			if m.Origin == c.origin {
				continue
			}
			var e Entry
			if json.Unmarshal(m.Data, &e) != nil {
				continue // written by an incompatible version
			}
			c.rec.ingest(e)
		}
		if len(msgs) < clusterBatch {
			return
		}
	}
}

// health logs the feed's failures once each time it goes down and once
// when it heals.
func (c *Cluster) health(err error) {
	switch {
	case err != nil && !c.down:
		c.down = true
		c.log.Warn().Err(err).Msg("cluster feed unavailable: the admin view shows this replica only until it heals")
	case err == nil && c.down:
		c.down = false
		c.log.Info().Msg("cluster feed healed")
	}
}
