package inspect

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"strings"
)

// CallKey fingerprints one tool call the way a trajectory's Call.Fingerprint
// does (name + canonical arguments, metadata arguments left out), for callers
// that see calls outside a request history: the proxy comparing the tool
// calls of one streamed answer. scratch is reused between calls and returned.
func CallKey(scratch []byte, name, args string) (uint64, []byte) {
	trimmed := strings.TrimSpace(args)
	h := newFNV().str(name).byte(0)
	if k := rawKind(trimmed); (k == '{' || k == '[') && rawjson.Valid(rawjson.Bytes(trimmed)) {
		var cs canonScratch
		scratch = cs.appendCanonical(scratch[:0], trimmed, 0, defaultMetadataArgs)
		return uint64(h.bytes(scratch)), scratch
	}
	return uint64(h.str(trimmed)), scratch
}
