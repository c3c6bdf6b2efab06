package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http keeps idle client conns' reader goroutines until the
		// transport is closed; the clients' default transports are shared
		// by the SDKs and closed by none of them.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// fasthttp's worker-pool cleaner and the client's idle-conn cleaner
		// notice a stopped server or an idle pool only at their next tick
		// (seconds later); they exit on their own and hold no connection.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}
