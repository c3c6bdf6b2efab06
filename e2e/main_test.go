package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's worker-pool cleaner and the client's idle-conn cleaner
		// notice a stopped server or an idle pool only at their next tick
		// (seconds later); they exit on their own and hold no connection.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// fasthttp refreshes its cached Date header from one process-wide
		// goroutine, started once and never stopped (header.go updateServerDate).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}
