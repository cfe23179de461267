package static

import (
	"io/fs"
	"strings"
	"testing"
)

// TestStylesheetsBalanced: every embedded stylesheet opens as many blocks as
// it closes and holds no merge-conflict markers. A block left open by a bad
// merge does not fail loudly: the browser nests every later rule inside it,
// and they silently stop applying (it happened to the inbox's phone layout).
func TestStylesheetsBalanced(t *testing.T) {
	names, err := fs.Glob(FS, "*.css")
	if err != nil || len(names) == 0 {
		t.Fatalf("no stylesheets: %v", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatal(err)
		}
		depth, line := 0, 1
		inComment := false
		s := string(b)
		for i := 0; i < len(s); i++ {
			switch {
			case s[i] == '\n':
				line++
			case inComment:
				if strings.HasPrefix(s[i:], "*/") {
					inComment, i = false, i+1
				}
			case strings.HasPrefix(s[i:], "/*"):
				inComment, i = true, i+1
			case s[i] == '{':
				depth++
			case s[i] == '}':
				depth--
				if depth < 0 {
					t.Fatalf("%s:%d: a block is closed that was never opened", name, line)
				}
			}
		}
		if depth != 0 {
			t.Errorf("%s: %d blocks left open", name, depth)
		}
		for _, m := range []string{"<<<<<<<", ">>>>>>>", "\n=======\n"} {
			if strings.Contains(s, m) {
				t.Errorf("%s: merge-conflict marker %q", name, strings.TrimSpace(m))
			}
		}
	}
}
