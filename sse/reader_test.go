package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is an Event reduced to comparable values.
type ev struct {
	Raw, Name, Data, ID, Error string
	Retry                      int
	Comment, Partial, Blank    bool
	HasName, HasData, HasID    bool
}

func summarize(e Event) ev {
	return ev{
		Raw: string(e.Raw), Name: string(e.Name), Data: string(e.Data), ID: string(e.ID),
		Error: string(e.Error), Retry: e.Retry, Comment: e.Comment, Partial: e.Partial,
		Blank: e.Blank(), HasName: e.Name != nil, HasData: e.Data != nil, HasID: e.ID != nil,
	}
}

// readAll reads every event of rd, copying them, until an error.
func readAll(t testing.TB, rd io.Reader, max int) ([]ev, error) {
	t.Helper()
	r := NewReader(rd, max)
	var out []ev
	for range 1 << 20 {
		e, err := r.Next()
		if err != nil {
			if len(e.Raw) != 0 {
				t.Fatalf("Next returned %q with error %v", e.Raw, err)
			}
			return out, err
		}
		if len(e.Raw) == 0 {
			t.Fatalf("Next returned an empty event without error")
		}
		out = append(out, summarize(e))
	}
	t.Fatal("Next never ended")
	return nil, nil
}

func TestReaderGrammar(t *testing.T) {
	type w = ev
	tests := []struct {
		name string
		give string
		want []ev
	}{
		{
			name: "lf data",
			give: "data: hello\n\n",
			want: []w{{Raw: "data: hello\n\n", Data: "hello", HasData: true, Retry: -1}},
		},
		{
			name: "crlf",
			give: "data: a\r\n\r\ndata: b\r\n\r\n",
			want: []w{
				{Raw: "data: a\r\n\r\n", Data: "a", HasData: true, Retry: -1},
				{Raw: "data: b\r\n\r\n", Data: "b", HasData: true, Retry: -1},
			},
		},
		{
			name: "lone cr",
			give: "data: a\r\rdata: b\r\r",
			want: []w{
				{Raw: "data: a\r\r", Data: "a", HasData: true, Retry: -1},
				{Raw: "data: b\r\r", Data: "b", HasData: true, Retry: -1},
			},
		},
		{
			name: "mixed endings",
			give: "data: a\rdata: b\r\ndata: c\n\r\n",
			want: []w{{Raw: "data: a\rdata: b\r\ndata: c\n\r\n", Data: "a\nb\nc", HasData: true, Retry: -1}},
		},
		{
			name: "no space and two spaces",
			give: "data:x\ndata:  y\n\n",
			want: []w{{Raw: "data:x\ndata:  y\n\n", Data: "x\n y", HasData: true, Retry: -1}},
		},
		{
			name: "fields",
			give: "event: delta\nid: 42\nretry: 3000\ndata: {}\n\n",
			want: []w{{
				Raw: "event: delta\nid: 42\nretry: 3000\ndata: {}\n\n", Name: "delta", HasName: true,
				ID: "42", HasID: true, Retry: 3000, Data: "{}", HasData: true,
			}},
		},
		{
			name: "bad retry and id with NUL ignored",
			give: "retry: 1x\nretry:\nid: a\x00b\ndata: z\n\n",
			want: []w{{Raw: "retry: 1x\nretry:\nid: a\x00b\ndata: z\n\n", Data: "z", HasData: true, Retry: -1}},
		},
		{
			name: "comments",
			give: ": ping\n\n:\n\n",
			want: []w{
				{Raw: ": ping\n\n", Comment: true, Retry: -1},
				{Raw: ":\n\n", Comment: true, Retry: -1},
			},
		},
		{
			name: "comment beside data is not a comment block",
			give: ": x\ndata: 1\n\n",
			want: []w{{Raw: ": x\ndata: 1\n\n", Data: "1", HasData: true, Retry: -1}},
		},
		{
			name: "blank keep-alives",
			give: "\n\r\n\rdata: 1\n\n",
			want: []w{
				{Raw: "\n", Blank: true, Retry: -1},
				{Raw: "\r\n", Blank: true, Retry: -1},
				{Raw: "\r", Blank: true, Retry: -1},
				{Raw: "data: 1\n\n", Data: "1", HasData: true, Retry: -1},
			},
		},
		{
			name: "empty data fields dispatch empty data",
			give: "data\n\ndata:\ndata:\n\n",
			want: []w{
				{Raw: "data\n\n", Data: "", HasData: true, Retry: -1},
				{Raw: "data:\ndata:\n\n", Data: "\n", HasData: true, Retry: -1},
			},
		},
		{
			name: "llama.cpp error field",
			give: "error: {\"code\":400}\n\ndata: [DONE]\n\n",
			want: []w{
				{Raw: "error: {\"code\":400}\n\n", Error: `{"code":400}`, Retry: -1},
				{Raw: "data: [DONE]\n\n", Data: "[DONE]", HasData: true, Retry: -1},
			},
		},
		{
			name: "unknown field kept in raw",
			give: "foo: bar\nDATA: no\ndata: yes\n\n",
			want: []w{{Raw: "foo: bar\nDATA: no\ndata: yes\n\n", Data: "yes", HasData: true, Retry: -1}},
		},
		{
			name: "bom ignored once",
			give: bom + "data: a\n\n" + bom + "data: b\n\n",
			want: []w{
				{Raw: bom + "data: a\n\n", Data: "a", HasData: true, Retry: -1},
				{Raw: bom + "data: b\n\n", Retry: -1},
			},
		},
		{
			name: "unterminated trailing event",
			give: "data: 1\n\ndata: [DONE]",
			want: []w{
				{Raw: "data: 1\n\n", Data: "1", HasData: true, Retry: -1},
				{Raw: "data: [DONE]", Data: "[DONE]", HasData: true, Retry: -1, Partial: true},
			},
		},
		{
			name: "trailing event missing only the blank line",
			give: "data: 1\r\n",
			want: []w{{Raw: "data: 1\r\n", Data: "1", HasData: true, Retry: -1, Partial: true}},
		},
		{
			name: "trailing blank bytes are not partial",
			give: "data: 1\n\n\r",
			want: []w{
				{Raw: "data: 1\n\n", Data: "1", HasData: true, Retry: -1},
				{Raw: "\r", Blank: true, Retry: -1},
			},
		},
		{
			name: "empty stream",
			give: "",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(t, strings.NewReader(tt.give), 0)
			if err != io.EOF {
				t.Fatalf("error = %v; want io.EOF", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("events =\n%+v\nwant\n%+v", got, tt.want)
			}
			// Byte by byte, the events must mean the same; only a CRLF split
			// at a dispatch may move an LF to the next event.
			one, err := readAll(t, iotest.OneByteReader(strings.NewReader(tt.give)), 0)
			if err != io.EOF {
				t.Fatalf("one byte: error = %v; want io.EOF", err)
			}
			if g, w := meaning(one), meaning(got); g != w {
				t.Errorf("one byte: events =\n%s\nwant\n%s", g, w)
			}
		})
	}
}

// meaning renders what a client acts on: fields of the non-blank events.
func meaning(evs []ev) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Blank {
			continue
		}
		e.Raw = "" // the concatenation test covers Raw
		fmt.Fprintf(&b, "%+v\n", e)
	}
	return b.String()
}

func TestReaderSplitCRLF(t *testing.T) {
	// The CR ending an event arrives alone; its LF comes with the next read.
	rd := iotest.OneByteReader(strings.NewReader("data: a\r\n\r\ndata: b\r\n\r\n"))
	got, err := readAll(t, rd, 0)
	if err != io.EOF {
		t.Fatalf("error = %v; want io.EOF", err)
	}
	var raws, datas []string
	for _, e := range got {
		raws = append(raws, e.Raw)
		datas = append(datas, e.Data)
	}
	if w := []string{"data: a\r\n\r", "\ndata: b\r\n\r", "\n"}; fmt.Sprintf("%q", raws) != fmt.Sprintf("%q", w) {
		t.Errorf("Raw = %q; want %q", raws, w)
	}
	if w := []string{"a", "b", ""}; fmt.Sprintf("%q", datas) != fmt.Sprintf("%q", w) {
		t.Errorf("Data = %q; want %q", datas, w)
	}
	if !got[2].Blank || got[2].Partial {
		t.Errorf("last event %+v; want a blank, non-partial event", got[2])
	}
}

// chunkReader returns its input in reads of the given sizes, cycling.
type chunkReader struct {
	b     []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.sizes[c.i%len(c.sizes)], len(p), len(c.b))
	c.i++
	n = copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func fixtures(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	return files
}

func TestReaderRawReproducesInput(t *testing.T) {
	splits := [][]int{{1 << 20}, {1}, {2}, {3, 5, 7}, {4096}, {13, 1, 100}}
	for _, file := range fixtures(t) {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var whole []ev
		for _, sizes := range splits {
			t.Run(fmt.Sprintf("%s/%v", filepath.Base(file), sizes), func(t *testing.T) {
				r := NewReader(&chunkReader{b: in, sizes: sizes}, 0)
				var raw bytes.Buffer
				var got []ev
				for {
					e, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("Next: %v", err)
					}
					raw.Write(e.Raw)
					got = append(got, summarize(e))
				}
				if !bytes.Equal(raw.Bytes(), in) {
					t.Fatalf("concatenated Raw differs from input (%d bytes; want %d)", raw.Len(), len(in))
				}
				if whole == nil {
					whole = got
					return
				}
				if g, w := meaning(got), meaning(whole); g != w {
					t.Errorf("events differ from one-read parse:\n%s\nwant\n%s", g, w)
				}
			})
		}
	}
}

func TestReaderMax(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		max     int
		want    []string // Data of the events before the error
		wantErr error
	}{
		{name: "fits exactly", give: "data: 123\n\n", max: 11, want: []string{"123"}, wantErr: io.EOF},
		{name: "one byte over", give: "data: 1234\n\n", max: 11, wantErr: ErrEventTooLarge},
		{name: "small events pass a small max", give: strings.Repeat("data: 1\n\n", 100), max: 16,
			want: strings.Split(strings.Repeat("1", 100), ""), wantErr: io.EOF},
		{name: "large after small", give: "data: 1\n\ndata: " + strings.Repeat("x", 100) + "\n\n", max: 64,
			want: []string{"1"}, wantErr: ErrEventTooLarge},
		{name: "unterminated over max", give: "data: " + strings.Repeat("x", 100), max: 64, wantErr: ErrEventTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sizes := range [][]int{{1 << 20}, {1}, {7}} {
				r := NewReader(&chunkReader{b: []byte(tt.give), sizes: sizes}, tt.max)
				var got []string
				var err error
				for {
					var e Event
					if e, err = r.Next(); err != nil {
						break
					}
					got = append(got, string(e.Data))
					if cap(r.buf) > tt.max {
						t.Fatalf("buffer grew to %d; max %d", cap(r.buf), tt.max)
					}
				}
				if !errors.Is(err, tt.wantErr) || fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("split %v: events %q, error %v; want %q, %v", sizes, got, err, tt.want, tt.wantErr)
				}
				if err == ErrEventTooLarge {
					// The proxy falls back to raw copy: what was read but not
					// returned, then the rest, must be the remaining input.
					var done int
					for _, d := range got {
						done += len("data: \n\n") + len(d)
					}
					rest, _ := io.ReadAll(r.rd)
					if g := string(r.Buffered()) + string(rest); g != tt.give[done:] {
						t.Errorf("Buffered+rest = %q; want %q", g, tt.give[done:])
					}
					if _, err2 := r.Next(); err2 != ErrEventTooLarge {
						t.Errorf("error not sticky: %v", err2)
					}
				}
			}
		})
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	rd := io.MultiReader(strings.NewReader("data: 1\n\ndata: 2"), iotest.ErrReader(boom))
	r := NewReader(rd, 0)
	e, err := r.Next()
	if err != nil || string(e.Data) != "1" {
		t.Fatalf("Next = %q, %v; want 1, nil", e.Data, err)
	}
	if _, err := r.Next(); err != boom {
		t.Fatalf("Next error = %v; want %v", err, boom)
	}
	if g := string(r.Buffered()); g != "data: 2" {
		t.Errorf("Buffered = %q; want %q", g, "data: 2")
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	if _, err := NewReader(emptyReader{}, 0).Next(); err != io.ErrNoProgress {
		t.Errorf("Next error = %v; want io.ErrNoProgress", err)
	}
}

func TestReaderReset(t *testing.T) {
	r := NewReader(strings.NewReader("data: 1\n\ndata: par"), 32)
	for {
		if _, err := r.Next(); err != nil {
			break
		}
	}
	r.Reset(strings.NewReader(bom + "data: 2\n\n"))
	e, err := r.Next()
	if err != nil || string(e.Data) != "2" || string(e.Raw) != bom+"data: 2\n\n" {
		t.Fatalf("after Reset Next = %q (raw %q), %v; want 2", e.Data, e.Raw, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after Reset final error = %v; want io.EOF", err)
	}
	if r.max != 32 {
		t.Errorf("Reset changed max to %d", r.max)
	}
}

func TestReaderBOMSplit(t *testing.T) {
	rd := iotest.OneByteReader(strings.NewReader(bom + "data: x\n\n"))
	got, err := readAll(t, rd, 0)
	if err != io.EOF || len(got) != 1 || got[0].Data != "x" {
		t.Fatalf("events %+v, %v; want one event with data x", got, err)
	}
	// A lone BOM prefix at EOF is content, not a BOM.
	got, err = readAll(t, strings.NewReader("\xEF\xBB"), 0)
	if err != io.EOF || len(got) != 1 || !got[0].Partial || got[0].Raw != "\xEF\xBB" {
		t.Fatalf("events %+v, %v; want one partial event", got, err)
	}
}

// TestReaderNextBuffered checks that NextBuffered returns exactly the
// events complete in what was read, never reads, and leaves the rest to
// Next: the events come out as Next alone would return them.
func TestReaderNextBuffered(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   [][]string // per Next: the Raw of Next's event, then of each NextBuffered one
	}{
		{"one event per read", []string{"data: a\n\n", "data: b\n\n"}, [][]string{{"data: a\n\n"}, {"data: b\n\n"}}},
		{"three in one read", []string{"data: a\n\ndata: b\n\n: ping\n\n"},
			[][]string{{"data: a\n\n", "data: b\n\n", ": ping\n\n"}}},
		{"second one incomplete", []string{"data: a\n\ndata: b\n", "\n"},
			[][]string{{"data: a\n\n"}, {"data: b\n\n"}}},
		{"CRLF", []string{"data: a\r\n\r\ndata: b\r\n\r\nda", "ta: c\r\n\r\n"},
			[][]string{{"data: a\r\n\r\n", "data: b\r\n\r\n"}, {"data: c\r\n\r\n"}}},
		{"lone CRs", []string{"data: a\r\rdata: b\r\r"}, [][]string{{"data: a\r\r", "data: b\r\r"}}},
		{"trailing partial event", []string{"data: a\n\ndata: b"}, [][]string{{"data: a\n\n"}, {"data: b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := &chunkReader{}
			for _, c := range tt.chunks {
				cr.b = append(cr.b, c...)
				cr.sizes = append(cr.sizes, len(c))
			}
			r := NewReader(cr, 0)
			var got [][]string
			for {
				e, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				batch := []string{string(e.Raw)}
				for {
					e, ok := r.NextBuffered()
					if !ok {
						break
					}
					batch = append(batch, string(e.Raw))
				}
				got = append(got, batch)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("events by read = %q; want %q", got, tt.want)
			}
		})
	}
}

// readyReads is a source whose reads are ready (Ready) or would wait; a
// read that would wait, while a test expects none, fails.
type readyReads struct {
	t      *testing.T
	reads  []string
	ready  []bool // whether reads[i] is there already
	noWait bool   // reading now must not wait
}

func (r *readyReads) Read(p []byte) (int, error) {
	if len(r.reads) == 0 {
		return 0, io.EOF
	}
	if r.noWait && !r.ready[0] {
		r.t.Fatalf("ReadReady read %q, which was not there yet", r.reads[0])
	}
	n := copy(p, r.reads[0])
	r.reads, r.ready = r.reads[1:], r.ready[1:]
	return n, nil
}

func (r *readyReads) Ready() bool { return len(r.ready) > 0 && r.ready[0] }

// ReadReady reads on only while the source holds bytes, and returns the
// next event once all of it is there.
func TestReadReady(t *testing.T) {
	src := &readyReads{t: t,
		reads: []string{"data: 1\n\n", "data: 2\n\nda", "ta: 3\n\n", "data: 4\n\n"},
		ready: []bool{false, true, true, false}}
	r := NewReader(src, 0)
	var got []string
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, string(ev.Raw))
	src.noWait = true
	for {
		ev, ok := r.ReadReady()
		if !ok {
			break
		}
		got = append(got, string(ev.Raw))
	}
	src.noWait = false
	if r.Ready() {
		t.Error("Ready after the ready reads are drained")
	}
	ev, err = r.Next()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, string(ev.Raw))
	if want := "data: 1\n\n|data: 2\n\n|data: 3\n\n|data: 4\n\n"; strings.Join(got, "|") != want {
		t.Errorf("events %q; want %q", strings.Join(got, "|"), want)
	}
}

// blockingReader has nothing (ErrWouldBlock) before each of r's reads, as a
// socket read without waiting between a server's writes.
type blockingReader struct {
	r   io.Reader
	had bool
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.had = !b.had; b.had {
		return 0, ErrWouldBlock
	}
	return b.r.Read(p)
}

// TestReaderWouldBlock: a reader that has nothing yet makes Next return
// ErrWouldBlock, not sticky, and the calls after it go on where it was:
// every fixture reads to the same events as through a reader that waits,
// whatever the sizes of the reads.
func TestReaderWouldBlock(t *testing.T) {
	for _, file := range fixtures(t) {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, sizes := range [][]int{{1}, {7, 3}, {4096}} {
			want, err := readAll(t, &chunkReader{b: in, sizes: sizes}, 0)
			if err != io.EOF {
				t.Fatalf("%s: %v", file, err)
			}
			r := NewReader(&blockingReader{r: &chunkReader{b: in, sizes: sizes}}, 0)
			var got []ev
			blocked := 0
			for {
				e, err := r.Next()
				if err == ErrWouldBlock {
					if blocked++; blocked > 2*len(in)+2 { // a read a byte, and one more
						t.Fatalf("%s, reads of %v: ErrWouldBlock %d times", file, sizes, blocked)
					}
					continue
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s, reads of %v: Next: %v", file, sizes, err)
				}
				got = append(got, summarize(e))
			}
			if blocked == 0 {
				t.Errorf("%s, reads of %v: Next never returned ErrWouldBlock", file, sizes)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, reads of %v: %d events through ErrWouldBlock, %d without; they differ", file, sizes, len(got), len(want))
			}
		}
	}
}
