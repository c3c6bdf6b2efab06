package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// cleanPath resolves the dot-segments ("." and "..") of p, a request path as
// the client sent it, as RFC 3986 section 5.2.4 does and nginx does before
// it joins a path onto proxy_pass's: the upstream path is the base path
// joined with the result, and a ".." left in it would climb out of the base
// (from /tenant-a/v1 into /tenant-b/v1) on any server or gateway that
// resolves dot-segments itself, with the proxy's api_key.
//
// out is p itself when p has no dot-segment (no copy, the common case),
// else the resolved path appended to dst. ok is false when p climbs above
// its root, or spells a dot-segment in a form that servers read
// differently: percent-encoded dots or slashes (%2e%2e, ..%2f), a
// backslash, or path parameters ("..;x"). No client sends those for a
// real resource; refusing them is safer than guessing how the upstream
// decodes them.
func cleanPath(dst, p []byte) (out []byte, ok bool) {
	if len(p) == 0 || p[0] != '/' || !bytes.ContainsAny(p, ".%\\;") {
		return p, true
	}
	dots := false
	for rest := p[1:]; ; {
		seg, next, more := bytes.Cut(rest, []byte{'/'})
		switch {
		case isDotSegment(seg):
			dots = true
		case hiddenDotSegment(seg):
			return nil, false
		}
		if !more {
			break
		}
		rest = next
	}
	if !dots {
		return p, true
	}
	out = append(dst, '/')
	base := len(dst) + 1 // out[base:] is the resolved path after its leading slash
	for rest := p[1:]; ; {
		seg, next, more := bytes.Cut(rest, []byte{'/'})
		switch string(seg) {
		case ".":
		case "..":
			if len(out) == base {
				return nil, false // above the root
			}
			// Drop the last segment and its slash: "/a/b/" -> "/a/".
			i := bytes.LastIndexByte(out[base:len(out)-1], '/')
			out = out[:base+i+1]
		default:
			out = append(out, seg...)
			if more {
				out = append(out, '/')
			}
		}
		if !more {
			break
		}
		rest = next
	}
	return out, true
}

func isDotSegment(seg []byte) bool { return string(seg) == "." || string(seg) == ".." }

// hiddenDotSegment reports a segment that some server reads as a
// dot-segment, or as several segments one of which is: its dots or slashes
// percent-encoded, a backslash for a slash, a ";" parameter after dots.
func hiddenDotSegment(seg []byte) bool {
	if !bytes.ContainsAny(seg, "%\\;") {
		return false
	}
	// Decode what matters into a small buffer: dots, and both slashes as
	// separators; everything else stays as it is.
	var buf [64]byte
	d := buf[:0]
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' && i+2 < len(seg) {
			switch hex := seg[i+1 : i+3]; {
			case asciiEqualFold(hex, "2e"):
				c, i = '.', i+2
			case asciiEqualFold(hex, "2f"), asciiEqualFold(hex, "5c"):
				c, i = '/', i+2
			}
		}
		if c == '\\' {
			c = '/'
		}
		d = append(d, c)
	}
	for len(d) > 0 {
		var part []byte
		part, d, _ = bytes.Cut(d, []byte{'/'})
		part, _, _ = bytes.Cut(part, []byte{';'})
		if isDotSegment(part) {
			return true
		}
	}
	return false
}

// cleanRequestPath resolves the dot-segments of ctx's path before it is
// routed and joined onto the upstream's base (cleanPath); false, with a 400
// answered, when the path climbs above its root or hides a dot-segment.
func cleanRequestPath(ctx *fasthttp.RequestCtx) bool {
	p := ctx.URI().PathOriginal()
	out, ok := cleanPath(nil, p)
	if !ok {
		writeError(ctx, fasthttp.StatusBadRequest,
			"loopguard: the request path climbs above its root or spells a dot-segment in an encoded form",
			"invalid_request_error", "invalid_path")
		return false
	}
	if len(p) > 0 && (len(out) != len(p) || &out[0] != &p[0]) {
		ctx.URI().SetPathBytes(out)
	}
	return true
}
