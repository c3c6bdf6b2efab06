// Package memtest helps tests check what outlives a request: a string that
// shares a request's memory keeps all of it alive.
package memtest

import "unsafe"

// Within reports whether s's bytes lie inside buf's, as those of a substring
// of buf do. An empty s shares nothing.
func Within(s, buf string) bool {
	if len(s) == 0 || len(buf) == 0 {
		return false
	}
	p, b := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(buf)))
	return p >= b && p < b+uintptr(len(buf))
}
