package clienttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
)

// TestREADMELinksStayInTheRepository: the READMEs' relative links name
// files of this repository that exist, never a path outside it (the
// contract is handlers/openapi.json, not a file next to the repository).
func TestREADMELinksStayInTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, name := range []string{"README.md", "client/README.md", "static/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			abs := filepath.Join(root, filepath.Dir(name), target)
			if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				t.Errorf("%s links to %s, outside the repository", name, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to %s, which does not exist", name, m[1])
			}
		}
	}
}

// TestClientREADMEListsEveryOperation: client/README.md's table names the
// method of every operation of the OpenAPI document.
func TestClientREADMEListsEveryOperation(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../client/README.md")
	if err != nil {
		t.Fatal(err)
	}
	v, err := apicontract.New(handlers.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	for op, route := range v.Operations() {
		if !strings.Contains(string(b), "| `"+op+"` |") {
			t.Errorf("client/README.md's operations table has no row for %s (%s): add it with its client method", op, route)
		}
	}
}
