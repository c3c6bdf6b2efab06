package policy

import (
	"context"
	"fmt"
	"strings"
)

// Bounds of a server-side history record.
const (
	// MaxRecordItems is how many items a record keeps, the newest.
	MaxRecordItems = 64
	// MaxRecordItemBytes bounds one item; longer items are left out (a
	// function output that large is rarely repeated byte for byte, and the
	// record must stay cheap to load on every request).
	MaxRecordItemBytes = 8 << 10
)

// RecordKey names the record of a Responses API history kept by the
// upstream: the response a request continues (previous_response_id) or the
// conversation it belongs to. Response ids are unique, so records of
// different sessions never collide.
func RecordKey(previousResponseID, conversation string) string {
	if conversation != "" {
		return "c:" + conversation
	}
	return "r:" + previousResponseID
}

// Record loads the items recorded under key (see RecordKey); none when the
// key is unknown.
func (p *Policy) Record(ctx context.Context, key string) ([]string, error) {
	st, err := p.store.Load(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("load record %s: %w", key, err)
	}
	return st.Items, nil
}

// SaveRecord stores items under key, keeping the newest MaxRecordItems and
// leaving out items over MaxRecordItemBytes.
func (p *Policy) SaveRecord(ctx context.Context, key string, items []string) error {
	kept := make([]string, 0, min(len(items), MaxRecordItems))
	for _, it := range items {
		if len(it) <= MaxRecordItemBytes {
			// A copy: items are substrings of a request or response body.
			kept = append(kept, strings.Clone(it))
		}
	}
	if n := len(kept) - MaxRecordItems; n > 0 {
		kept = kept[n:]
	}
	_, err := p.store.Update(ctx, key, func(st *State) error {
		st.Items = append(st.Items[:0], kept...)
		st.Updated = p.now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("save record %s: %w", key, err)
	}
	return nil
}
