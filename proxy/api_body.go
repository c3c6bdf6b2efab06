package proxy

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// textFeed feeds the text t of item i (part j of it, -1 when the item is
// the text itself) to the detector; false: the text degenerated, stop.
type textFeed func(i, j int, t gjson.Result) bool

// cutItemsBody cuts a degenerate non-streamed answer whose text lies in an
// array of items (Responses: output; Anthropic: content). each feeds item
// i's text, in order, to feed, and returns false to stop; all the text
// feeds one detector, as the streamed text does. A degenerate text is cut
// where the repetition began and what followed it is dropped, as a
// streamed cut ends the answer there; mark is the edit that says the
// answer ended there, given the path of the item the cut fell in. nil:
// the answer is left alone.
func cutItemsBody(w *cutWatch, b []byte, items string, each func(i int, it gjson.Result, feed textFeed) bool,
	mark func(at string) jsonEdit) []byte {
	d := w.textDetector(0)
	var fed int64
	item, part := -1, -1 // where the cut falls: item, part of it
	var text string
	var off int64
	feed := func(i, j int, t gjson.Result) bool {
		s := t.String()
		w.bytes += int64(len(s))
		if !d.Write([]byte(s)) {
			fed += int64(len(s))
			return true
		}
		item, part, text = i, j, s
		off = min(max(d.Offset()-fed, 0), int64(len(s)))
		return false
	}
	gjson.GetBytes(b, items).ForEach(func(i, it gjson.Result) bool {
		return each(int(i.Int()), it, feed)
	})
	if item < 0 {
		return nil
	}
	w.cutAt(d.Detection(), off)
	at := items + "." + strconv.Itoa(item)
	var edits []jsonEdit
	// Later entries go first so that deleting them keeps the indexes valid.
	for k := len(gjson.GetBytes(b, items).Array()) - 1; k > item; k-- {
		edits = append(edits, jsonEdit{items + "." + strconv.Itoa(k), nil})
	}
	textAt := at + ".text"
	if part >= 0 {
		for k := len(gjson.GetBytes(b, at+".content").Array()) - 1; k > part; k-- {
			edits = append(edits, jsonEdit{at + ".content." + strconv.Itoa(k), nil})
		}
		textAt = at + ".content." + strconv.Itoa(part) + ".text"
	}
	edits = append(edits, mark(at), jsonEdit{textAt, text[:off]})
	out := b
	for _, e := range edits {
		var err error
		if e.value == nil {
			out, err = sjson.DeleteBytes(out, e.path)
		} else {
			out, err = sjson.SetBytes(out, e.path, e.value)
		}
		if err != nil {
			return nil // fail open: the answer passes unchanged
		}
	}
	return out
}

// jsonEdit is one change to a JSON body: set path to value, or delete it
// when value is nil.
type jsonEdit struct {
	path  string
	value any
}
