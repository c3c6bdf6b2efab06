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
	)
}
