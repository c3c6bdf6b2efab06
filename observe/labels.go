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

// levelNone is the level label of an intervention on no rung of the
// ladder, policy's Level -1: a session budget's warn or terminate.
const levelNone = "none"

// nLevel counts the level labels: "none", then the rungs 0 to maxLevel.
const nLevel = maxLevel + 2

// levelLabels holds the label of level l at levelSlot(l).
var levelLabels = func() [nLevel]string {
	var l [nLevel]string
	l[levelSlot(-1)] = levelNone
	for i := 0; i < maxLevel; i++ {
		l[levelSlot(i)] = strconv.Itoa(i)
	}
	l[levelSlot(maxLevel)] = strconv.Itoa(maxLevel) + "+"
	return l
}()

// levelIndex bounds a decision's level to those the labels tell apart:
// -1 (no rung) to maxLevel. The timeline and the stats show it as is.
func levelIndex(level int) int {
	return min(max(level, -1), maxLevel)
}

// levelSlot is where level (bounded by levelIndex) counts in the metrics'
// arrays and levelLabels.
func levelSlot(level int) int { return level + 1 }

// Stage names the step whose failure let a request or the rest of an
// answer through unchanged (fail open): the stage label of
// loopguard_fail_open_total. The proxy names its failures by these
// constants, so that the labels are the ones it writes.
type Stage string

// The fail-open stages.
const (
	// StageUnreadableHistory: the request's history could not be read.
	StageUnreadableHistory Stage = "unreadable_history"
	StageDetector          Stage = "detector"
	StagePolicy            Stage = "policy"
	StageStore             Stage = "store"
	StageInject            Stage = "inject"
	StageTerminate         Stage = "terminate"
	// StagePanic: a panic on the request path.
	StagePanic Stage = "panic"
	// StageStream: a panic on the response path; the rest of the answer
	// passes through.
	StageStream Stage = "stream"
	// StageUndecodableBody: a request body whose Content-Encoding does not
	// decode.
	StageUndecodableBody Stage = "undecodable_body"
)

// stages are the stage labels in order, "other" (a stage not declared
// above) last.
var stages = [...]Stage{StageUnreadableHistory, StageDetector, StagePolicy, StageStore, StageInject, StageTerminate,
	StagePanic, StageStream, StageUndecodableBody, "other"}

const nStage = len(stages)

func stageIndex(s Stage) int {
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
