package hotlines

import (
	"testing"
	"unsafe"
)

func TestAdd(t *testing.T) {
	tests := []struct {
		name  string
		sizes []uintptr
		want  int
	}{
		{"a byte is a line", []uintptr{1}, 1},
		{"a line", []uintptr{64}, 1},
		{"a byte over", []uintptr{65}, 2},
		{"a large object, its head", []uintptr{4096}, ObjectLines},
		{"no more than the list holds", []uintptr{4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}, Max},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l List
			mem := make([]byte, 4096)
			base := unsafe.Pointer(&mem[0])
			for _, size := range tt.sizes {
				l.Add(base, size)
			}
			if l.Len() != tt.want {
				t.Fatalf("%d lines listed; want %d", l.Len(), tt.want)
			}
			for i, p := range l.Lines() {
				if off := uintptr(p) - uintptr(base); off%LineSize != 0 || off >= ObjectLines*LineSize {
					t.Errorf("line %d at offset %d", i, off)
				}
			}
			for i := 0; i < len(mem); i += LineSize {
				mem[i] = 1
			}
			if got := l.Load(); got != byte(l.Len()) {
				t.Errorf("Load = %d; want a byte of each of the %d lines", got, l.Len())
			}
		})
	}
	var l List
	l.Add(nil, 64)
	if l.Len() != 0 {
		t.Errorf("nil listed %d lines", l.Len())
	}
}
