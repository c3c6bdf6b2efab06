package sse

import (
	"bytes"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// objectView validates one event's data as a JSON object and returns a view
// of it for the walk (nothing of it may be kept without a copy): "" and nil
// for empty data, "" and ErrInvalidChunk for anything but an object.
func objectView(data []byte) (string, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return "", nil
	}
	if !rawjson.Valid(data) || data[0] != '{' {
		return "", ErrInvalidChunk
	}
	return rawjson.View(data), nil
}

// caller is an accumulated item (an Anthropic content block, a Responses
// output item) that may be a tool call.
type caller interface{ isCall() bool }

// callPos is the position of *it among the calls of items (counting the
// calls before it), -1 when it is not in items.
func callPos[T any, P interface {
	*T
	caller
}](items []T, it *T) int {
	pos := 0
	for i := range items {
		if &items[i] == it {
			return pos
		}
		if P(&items[i]).isCall() {
			pos++
		}
	}
	return -1
}

// nthCall returns the call at position pos among items, nil if there is none.
func nthCall[T any, P interface {
	*T
	caller
}](items []T, pos int) *T {
	for i := range items {
		if !P(&items[i]).isCall() {
			continue
		}
		if pos == 0 {
			return &items[i]
		}
		pos--
	}
	return nil
}
