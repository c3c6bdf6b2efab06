//go:build !unix

package proxy

import (
	"testing"
	"time"
)

// processCPU is not measured here (no getrusage): the cpu-ns/op metric
// reads 0.
func processCPU(*testing.B) time.Duration { return 0 }
