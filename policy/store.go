package policy

import (
	"context"
	"errors"
	"time"
)

// Store keeps session states. Implementations are safe for concurrent use.
type Store interface {
	// Load returns a copy of key's state; the zero State when there is none.
	Load(ctx context.Context, key string) (State, error)
	// Update applies fn to key's state atomically: no other Update of key
	// interleaves between the read fn sees and the write of its result.
	// fn may run more than once (optimistic stores retry on conflict), so it
	// must be a pure function of its argument; it must not call the Store.
	// When fn returns an error nothing is written and Update returns it.
	// Update returns the state as written.
	Update(ctx context.Context, key string, fn func(*State) error) (State, error)
}

// GlobalRecorder is implemented by stores shared across replicas to detect
// the same loop pattern in many sessions of one deployment (a "global doom
// loop"). Policy finds it by type assertion.
type GlobalRecorder interface {
	// RecordPattern notes that session looped on pattern at time at and
	// returns how many distinct sessions did so within window. incident is
	// true for exactly one caller per window once that number reaches
	// threshold, so that the incident is reported once.
	RecordPattern(ctx context.Context, pattern, session string, at time.Time, window time.Duration, threshold int) (sessions int, incident bool, err error)
}

// ErrConflict reports an Update that kept losing races for its key.
var ErrConflict = errors.New("policy: store update conflict, retries exhausted")
