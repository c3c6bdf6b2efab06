package inspect

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestCallFacts: the facts of a call's arguments, whether setArgs stored
// them or a Call built by hand computes them on use.
func TestCallFacts(t *testing.T) {
	for _, tt := range []struct {
		name, args, primary string
		want                uint8
		path, old, new      string // the edit's path and texts, unescaped
	}{
		{name: "no quote", args: `[1,2]`},
		{name: "plain command", args: `{"command":"ls -la"}`, primary: "ls -la", want: argsQuoted | callReadOnly},
		{name: "changing command", args: `{"command":"make"}`, primary: "make", want: argsQuoted},
		{name: "path only", args: `{"path":"a.go","new_str":"x"}`, primary: "a.go", want: argsQuoted},
		{name: "replace", args: `{"new_str":"y","old_str":"x","path":"a.go"}`, primary: "a.go", want: argsQuoted | argsReplace | argsNamesPath, path: "a.go", old: "x", new: "y"},
		{name: "first pair", args: `{"new":"b","new_string":"y","old":"a","old_string":"x"}`, want: argsQuoted | argsReplace, old: "x", new: "y"},
		{name: "half pair", args: `{"content":"c","file":"f","old_str":"x"}`, want: argsQuoted | argsWrite | argsNamesPath, path: "f", new: "c"},
		{name: "write", args: `{"content":"z","file_path":"a.go"}`, want: argsQuoted | argsWrite | argsNamesPath, path: "a.go", new: "z"},
		{name: "open file", args: `{"new":"y","old":"x"}`, want: argsQuoted | argsReplace, old: "x", new: "y"},
		{name: "escaped key", args: `{"content":"q","p\u0061th":"a.go"}`, want: argsQuoted | argsWrite | argsNamesPath, path: "a.go", new: "q"},
		{name: "escaped texts", args: `{"new_str":"x\u0041\"","old_str":"x\ny\\","path":"a\/b.go"}`, want: argsQuoted | argsReplace | argsNamesPath, path: "a/b.go", old: "x\ny\\", new: "xA\""},
		{name: "empty path", args: `{"content":"x","path":""}`, want: argsQuoted | argsWrite | argsNamesPath, new: "x"},
		{name: "number path", args: `{"content":"x","file":"b.go","path":1}`, want: argsQuoted | argsWrite | argsNamesPath, path: "b.go", new: "x"},
		{name: "first of twins", args: `{"content":"x","path":"a","path":"b"}`, want: argsQuoted | argsWrite | argsNamesPath, path: "a", new: "x"},
		{name: "invalid", args: `{"content":"x","path":"a"`, want: argsQuoted},
		{name: "patch", args: `{"input":"*** Begin Patch\n*** Update File: a.go\n"}`, want: argsQuoted | argsPatch}, // its \n is an escape
		{name: "restore", args: `{"command":"git checkout -- a.go"}`, primary: "git checkout -- a.go", want: argsQuoted | primaryRestores},
		{name: "copy back", args: `{"command":"cp a.bak a"}`, primary: "cp a.bak a", want: argsQuoted | primaryRestores},
		{name: "git, no restore", args: `{"command":"git checkout main"}`, primary: "git checkout main", want: argsQuoted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Call{Name: "tool", Args: tt.args, Primary: tt.primary}
			want := callFacts{bits: tt.want | factsKnown, target: targetHash(tt.primary)}
			if tt.want&(argsReplace|argsWrite) != 0 {
				want.edit = &editFacts{path: tt.path, new: hashString(tt.new) | 1}
			}
			if tt.want&argsReplace != 0 {
				want.edit.old = hashString(tt.old) | 1
			}
			if got := c.known(); !sameFacts(got, want) {
				t.Errorf("facts of a built call %s, want %s", showFacts(got), showFacts(want))
			}
			c.storeFacts(argFactsOf(&c))
			if got := c.storedFacts(); !sameFacts(got, want) {
				t.Errorf("stored facts %s, want %s", showFacts(got), showFacts(want))
			}
		})
	}
	tr, err := Parse([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"git checkout -- a.go\"}"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.Steps[0].Calls[0]; !sameFacts(c.storedFacts(), argFactsOf(&c)) || c.storedFacts().bits&primaryRestores == 0 {
		t.Errorf("parsed call's facts %s, want %s", showFacts(c.storedFacts()), showFacts(argFactsOf(&c)))
	}
}

// sameFacts compares facts by value, the edit's too.
func sameFacts(a, b callFacts) bool {
	if (a.edit == nil) != (b.edit == nil) || a.edit != nil && *a.edit != *b.edit {
		return false
	}
	a.edit, b.edit = nil, nil
	return a == b
}

func showFacts(f callFacts) string {
	if f.edit == nil {
		return fmt.Sprintf("{bits %08b target %x}", f.bits, f.target)
	}
	return fmt.Sprintf("{bits %08b target %x edit %+v}", f.bits, f.target, *f.edit)
}

// callFactsRef computes a call's facts the way the rules read them before
// they were stored: gjson finding each argument, appendRestores and
// readOnly on the call.
func callFactsRef(c *Call) callFacts {
	f := callFacts{bits: factsKnown, target: targetHash(c.Primary)}
	if strings.Contains(c.Args, `"`) {
		f.bits |= argsQuoted
	}
	if strings.Contains(c.Args, patchFile) {
		f.bits |= argsPatch
	}
	if rs, _ := appendRestores(nil, c.Primary); len(rs) > 0 {
		f.bits |= primaryRestores
	}
	if readOnly(c) {
		f.bits |= callReadOnly
	}
	if f.bits&(argsQuoted|argsPatch) != argsQuoted || !strings.HasPrefix(c.Args, "{") || !gjson.Valid(c.Args) {
		return f
	}
	str := func(k string) (string, bool) {
		r := gjson.Get(c.Args, k)
		return r.Str, r.Type == gjson.String
	}
	var ed editFacts
	for _, kp := range editPairs {
		o, ok1 := str(kp[0])
		n, ok2 := str(kp[1])
		if ok1 && ok2 {
			ed.old, ed.new, f.bits = hashString(o)|1, hashString(n)|1, f.bits|argsReplace
			break
		}
	}
	if f.bits&argsReplace == 0 {
		for _, k := range contentKeys {
			if v, ok := str(k); ok {
				ed.new, f.bits = hashString(v)|1, f.bits|argsWrite
				break
			}
		}
		if f.bits&argsWrite == 0 {
			return f
		}
	}
	for _, k := range pathKeys {
		if v, ok := str(k); ok {
			ed.path, f.bits = v, f.bits|argsNamesPath
			break
		}
	}
	f.edit = &ed
	return f
}

// TestCallFactsCorpus: every call of the corpus keeps the facts its
// arguments have, as the rules would read them each time.
func TestCallFactsCorpus(t *testing.T) {
	calls, edits := 0, 0
	for _, cc := range loadCorpus(t) {
		tr, err := Parse(cc.Request)
		if err != nil {
			continue
		}
		for s := range tr.Steps {
			for k := range tr.Steps[s].Calls {
				c := &tr.Steps[s].Calls[k]
				if want := callFactsRef(c); !sameFacts(c.storedFacts(), want) {
					t.Errorf("%s step %d call %d: stored facts %s, want %s", cc.ID, s, k, showFacts(c.storedFacts()), showFacts(want))
				}
				calls++
				if c.storedFacts().bits&(argsReplace|argsWrite) != 0 {
					edits++
				}
			}
		}
	}
	if calls < 1000 || edits < 50 {
		t.Errorf("%d calls, %d edits: the corpus should hold more of both", calls, edits)
	}
}

// randomEditArgs writes an arguments object of random edit-like members:
// names the rules read and others, string values with escapes (a lone
// surrogate among them), other kinds, twins.
func randomEditArgs(rng *rand.Rand) string {
	names := []string{"path", "file_path", "file", "filename", "old_str", "new_str", "old", "new", "search", "replace", "find",
		"content", "text", "code", "command", "p\\u0061th", "input", "x"}
	texts := []string{`""`, `"a.go"`, `"src/a.go"`, `"x\ny"`, `"\"q\""`, `"\\"`, `"\u00e9"`, `"\ud800"`, `"a\/b"`, `"return 1"`, `1`, `null`, `true`, `[]`, `{"path":"in.go"}`}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := 0, rng.IntN(6); i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", names[rng.IntN(len(names))], texts[rng.IntN(len(texts))])
	}
	b.WriteByte('}')
	return strings.ReplaceAll(b.String(), `\\u0061`, `\u0061`) // %q escaped the key's escape
}

// TestCallFactsRandom: the stored facts of random edit arguments are
// those read each time.
func TestCallFactsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	kinds := map[uint8]int{}
	for i := 0; i < 20000; i++ {
		c := Call{Name: "edit", Args: randomEditArgs(rng)}
		got, want := argFactsOf(&c), callFactsRef(&c)
		if !sameFacts(got, want) {
			t.Fatalf("%s: facts %s, want %s", c.Args, showFacts(got), showFacts(want))
		}
		kinds[got.bits]++
	}
	for _, b := range []uint8{argsReplace, argsWrite, argsNamesPath} {
		n := 0
		for k, v := range kinds {
			if k&b != 0 {
				n += v
			}
		}
		if n < 500 {
			t.Errorf("bit %b in %d of 20000 random arguments: the generator misses it", b, n)
		}
	}
}

// FuzzCallFacts holds the stored facts to those read each time.
func FuzzCallFacts(f *testing.F) {
	f.Add(`{"path":"a.go","old_str":"x","new_str":"y"}`, "")
	f.Add(`{"content":"x\ny","file_path":"a\/b"}`, "")
	f.Add(`{"command":"git checkout -- a.go"}`, "git checkout -- a.go")
	f.Add(`{"old":"\ud800","new":"\u00e9","path":1}`, "cp a.bak a")
	f.Fuzz(func(t *testing.T, args, primary string) {
		c := Call{Name: "edit", Args: args, Primary: primary}
		if got, want := argFactsOf(&c), callFactsRef(&c); !sameFacts(got, want) {
			t.Fatalf("facts %s, want %s", showFacts(got), showFacts(want))
		}
	})
}
