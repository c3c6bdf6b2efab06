package inspect

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestAppendRestores(t *testing.T) {
	tests := []struct {
		give string
		want []restore
	}{
		{"git checkout src/a.py", []restore{{"src/a.py", "HEAD"}}},
		{"cd /testbed && git checkout src/a.py 2>/dev/null || true", []restore{{"src/a.py", "HEAD"}}},
		{"git checkout -- src/a.py src/b.py", []restore{{"src/a.py", "HEAD"}, {"src/b.py", "HEAD"}}},
		{"git checkout HEAD~1 -- a.py", []restore{{"a.py", "HEAD~1"}}},
		{"git checkout v1.2 lib/x.go", []restore{{"lib/x.go", "v1.2"}}},
		{"git restore ./a.py", []restore{{"a.py", "HEAD"}}},
		{"git restore --source=main a.py", []restore{{"a.py", "main"}}},
		{"git stash", []restore{{".", "HEAD"}}},
		{"git stash push -m wip", []restore{{".", "HEAD"}}},
		{"git reset --hard", []restore{{".", "HEAD"}}},
		{"git checkout .", []restore{{".", "HEAD"}}},
		{"cp util.py.backup util.py", []restore{{"util.py", "util.py.backup"}}},
		{"cp -f /tmp/orig/util.py pkg/util.py && python t.py", []restore{{"pkg/util.py", "/tmp/orig/util.py"}}},
		{"git checkout -- /testbed/astropy/io/fits/card.py", []restore{{"fits/card.py", "HEAD"}}},
		{"mv settings.orig.py settings.py", []restore{{"settings.py", "settings.orig.py"}}},
		{"cp original_module.py module.py", []restore{{"module.py", "original_module.py"}}},
		{"cp /tmp/module.py src/module.py", []restore{{"src/module.py", "/tmp/module.py"}}},
		{"cp module.py.bak2 module.py", []restore{{"module.py", "module.py.bak2"}}},
		{"undo_edit /repo/a.py", []restore{{"repo/a.py", "undo"}}},
		// Not restores.
		{"git checkout main", nil},
		{"git checkout feature/fast-parse", nil},
		{"git checkout -b fix", nil},
		{"git restore --staged a.py", nil},
		{"git stash pop", nil},
		{"git reset HEAD a.py", nil},
		{"cp util.py util.py.backup", nil},
		{"cp a.py b.py", nil},
		{"cp template.py old_parser.py", nil},
		{"cp ../other/module.py module.py", nil},
		{"git diff > patch.txt", nil},
	}
	for _, tt := range tests {
		if got, _ := appendRestores(nil, tt.give); !slices.Equal(got, tt.want) {
			t.Errorf("appendRestores(%q) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

func TestTargetHash(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"pytest tests/test_a.py", "pytest tests/test_b.py", false},
		{"grep -rn MAX_CONN src/", "grep -rn 'MAX_CONN =' src/", true},
		{"read settings.ini", "read settings.ini", true},
		{"sed -i 's/a/b/' pkg/x.py", "sed -i 's/a/c/' pkg/x.py", true},
		{"sed -i 's/a/b/' pkg/x.py", "sed -i 's/a/b/' pkg/y.py", false},
	}
	for _, tt := range tests {
		if got := targetHash(tt.a) == targetHash(tt.b); got != tt.same {
			t.Errorf("targetHash(%q) == targetHash(%q) is %v; want %v", tt.a, tt.b, got, tt.same)
		}
	}
	if h := targetHash("git status"); h != 0 {
		t.Errorf("targetHash(git status) = %x; want 0", h)
	}
}

func TestAppendRestoresAttemptAfter(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"cp f.py.bak f.py", false},
		{"cp f.py.bak f.py && python t.py", true},
		{"cp f.py.bak f.py && sed -i 's/a/b/' f.py", true},
		{"cp f.py.bak f.py && cat f.py | head -5", false},
		{"cd /testbed && git checkout f.py 2>/dev/null || true", false},
		{"sed -i 's/a/b/' f.py && git checkout f.py", false},
	}
	for _, tt := range tests {
		if _, got := appendRestores(nil, tt.give); got != tt.want {
			t.Errorf("appendRestores(%q) attempts after = %v; want %v", tt.give, got, tt.want)
		}
	}
}

func TestReadOnlyCommand(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"cd /testbed && grep -n foo src/a.py | head -20", true},
		{"cat a.py 2>/dev/null", true},
		{"git diff > patch.txt", false},
		{"cd /testbed && python reproduce.py", false},
		{"find . -name '*.pyc' -delete", false},
		{"sed -n '10,20p' a.py", true},
		{"sed -i 's/a/b/' a.py", false},
	}
	for _, tt := range tests {
		if got := readOnlyCommand(tt.give); got != tt.want {
			t.Errorf("readOnlyCommand(%q) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

// TestFieldsAndNames: the copy-free word split and name match answer as
// strings.Fields and strings.ToLower+Contains do.
func TestFieldsAndNames(t *testing.T) {
	for _, s := range []string{"", "  ", "git checkout -- a.go", "\tsed -n '1,2p'\n f.py\v\f\r", "a\u00a0b c\u0085d", "naïve  word", "x"} {
		if got, want := fields(nil, s), strings.Fields(s); !slices.Equal(got, want) {
			t.Errorf("fields(%q) = %q; want %q", s, got, want)
		}
	}
	for _, name := range []string{"read_file", "ReadFile", "VIEW", "Bash", "str_replace_editor", "\u212Aill_list", "ſearch", "FETCH_url", "Grep", "rea", ""} {
		for _, w := range []string{"read", "view", "search", "list", "fetch", "grep"} {
			n := name
			if !isASCII(n) {
				n = strings.ToLower(n)
			}
			if got, want := containsLower(n, w), strings.Contains(strings.ToLower(name), w); got != want {
				t.Errorf("containsLower(%q, %q) = %v; want %v", name, w, got, want)
			}
		}
	}
}

// targetHashRef is targetHash as it was written first, with cutAny and
// strings.ContainsAny.
func targetHashRef(p string) uint64 {
	h, any := newFNV(), false
	for p != "" {
		var w string
		w, p = cutAny(p, " \t\n")
		if w == "" || w[0] == '-' || w[0] == '\'' || w[0] == '"' || strings.ContainsAny(w, "<>=$|;&(){}") {
			continue
		}
		if strings.IndexByte(w, '/') >= 0 || pathLike(w) {
			h = h.str(w).byte(0)
			any = true
		}
	}
	if !any {
		return 0
	}
	return uint64(h)
}

// TestTargetHashRandom: random command lines hash to the targets the
// first writing of targetHash found.
func TestTargetHashRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	parts := []string{"pytest", "tests/a.py", "a.go", "-v", "'s/a/b/'", `"x.py"`, "src/", "2>/dev/null", "$HOME/x.py", "a=b.py", "(cd", "x)",
		"é.py", "\xff.go", " ", "  ", "\t", "\n", "&&", "|", "README.md", "v1.2"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := rng.IntN(8); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
			if rng.IntN(3) > 0 {
				b.WriteByte(' ')
			}
		}
		if p := b.String(); targetHash(p) != targetHashRef(p) {
			t.Fatalf("targetHash(%q) = %x; want %x", p, targetHash(p), targetHashRef(p))
		}
	}
}
