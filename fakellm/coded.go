package fakellm

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// decodeBody undoes a request's Content-Encoding ce (a list, applied in
// order): clients such as Codex signed in with ChatGPT send zstd bodies,
// and the fake answers what they asked.
func decodeBody(ce string, body []byte) ([]byte, error) {
	list := strings.Split(ce, ",")
	for i := len(list) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch c := strings.ToLower(strings.TrimSpace(list[i])); c {
		case "", "identity":
			continue
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			r, err = zlib.NewReader(bytes.NewReader(body))
		case "zstd":
			var d *zstd.Decoder
			if d, err = zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1)); err == nil {
				defer d.Close()
				r = d
			}
		default:
			return nil, fmt.Errorf("fakellm: content coding %q", c)
		}
		if err != nil {
			return nil, err
		}
		if body, err = io.ReadAll(io.LimitReader(r, maxRequestBody)); err != nil {
			return nil, err
		}
	}
	return body, nil
}
