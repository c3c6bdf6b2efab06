package sse

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
