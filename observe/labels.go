package observe

import (
	"strconv"
	"strings"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
)

// Label values are closed sets: a metric label fed from client input (the
// request path, a model name) would let any client create unbounded series.
// Each set maps to a small index so that the hot path finds a pre-resolved
// child in an array instead of hashing label strings.

// transportLabels name how a turn came: an HTTP request, or a message on a
// Responses WebSocket.
var transportLabels = [...]string{"http", "websocket"}

// TransportWebSocket is ResponseInfo.Transport and RequestInfo.Transport of
// a turn on a Responses WebSocket; "" is an HTTP request.
const TransportWebSocket = "websocket"

// transportIndex is the index of transport in transportLabels.
func transportIndex(transport string) int {
	if transport == TransportWebSocket {
		return 1
	}
	return 0
}

// Path labels: each guarded API's (its registry label, internal/wireapi),
// then the OpenAI-compatible endpoints beside them that operators care
// about, matched by suffix so that prefixes (/v1, /openai/v1) do not
// multiply series, then "other".
var pathLabels = func() (l [len(wireapi.APIs) + len(otherEndpoints) + 1]string) {
	for i := range wireapi.APIs {
		l[i] = wireapi.APIs[i].Label
	}
	for i, e := range otherEndpoints {
		l[len(wireapi.APIs)+i] = e.label
	}
	l[pathOther] = "other"
	return l
}()

// otherEndpoints are the endpoints with a label of their own that no API
// guards, tried in order after the APIs' paths.
var otherEndpoints = [...]struct{ label, suffix string }{
	{"completions", "/completions"}, {"embeddings", "/embeddings"}, {"models", "/models"},
}

const pathOther = len(wireapi.APIs) + len(otherEndpoints)

// PathLabel returns the metrics label of a request path: the API's or the
// endpoint's name for the known ones, "other" for anything else.
func PathLabel(path string) string { return pathLabels[pathIndex(path)] }

func pathIndex(path string) int {
	if r := wireapi.Match(path); r.API != nil {
		return r.API.Index()
	}
	for i, e := range otherEndpoints {
		if strings.HasSuffix(path, e.suffix) {
			return len(wireapi.APIs) + i
		}
	}
	return pathOther
}

// categories are the detector families in label order (inspect.Categories),
// then the session budget's; "none" is a request without a category,
// "other" one this build does not know.
var categories = func() (c [nCat]inspect.Category) {
	copy(c[:], inspect.Categories[:])
	c[catBudget] = policy.BudgetCategory
	c[catNone], c[catOther] = "none", "other"
	return c
}()

const (
	catBudget = len(inspect.Categories)
	catNone   = catBudget + 1
	catOther  = catNone + 1
	nCat      = catNone + 2
)

func categoryIndex(c inspect.Category) int {
	if c == "" {
		return catNone
	}
	for i := 0; i < catNone; i++ {
		if categories[i] == c {
			return i
		}
	}
	return catOther
}

// actions are policy's actions in label order, "other" last.
var actions = [...]policy.Action{policy.None, policy.Warn, policy.Constrain, policy.Reset, policy.Terminate, policy.Shadow, "other"}

const nAct = len(actions)

func actionIndex(a policy.Action) int {
	if a == "" {
		return 0
	}
	for i := 0; i < nAct-1; i++ {
		if actions[i] == a {
			return i
		}
	}
	return nAct - 1
}

// isIntervention reports whether a changes what the agent sees.
func isIntervention(a policy.Action) bool {
	switch a {
	case policy.Warn, policy.Constrain, policy.Reset, policy.Terminate:
		return true
	}
	return false
}

// maxLevel bounds the level label: ladders are a handful of rungs; deeper
// levels share the last label.
const maxLevel = 8

var levelLabels = func() [maxLevel + 1]string {
	var l [maxLevel + 1]string
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	l[maxLevel] = strconv.Itoa(maxLevel) + "+"
	return l
}()

func levelIndex(level int) int {
	return min(max(level, 0), maxLevel)
}

// Fail-open stages, as the proxy names them.
var stages = [...]string{"malformed_json", "unreadable_history", "detector", "policy", "store", "inject", "terminate", "panic", "stream", "undecodable_body", "other"}

const nStage = len(stages)

func stageIndex(s string) int {
	for i := 0; i < nStage-1; i++ {
		if stages[i] == s {
			return i
		}
	}
	return nStage - 1
}

// Recovery outcomes.
const (
	outcomeRecovered   = "recovered"
	outcomeLoopedAgain = "looped_again"
)
