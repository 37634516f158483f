package checklist_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocSnippetsAreCode checks that every Go block of
// docs/executor-sdk.md is code that compiles: each must appear verbatim in
// a Go file of this module (which CI vets and tests) or of the SDK. A doc
// edit that drifts from the code, or a snippet written for the page alone,
// fails here.
func TestDocSnippetsAreCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/executor-sdk.md")
	if err != nil {
		t.Skipf("not in the taskhost repository: %v", err)
	}
	var sources []string
	for _, root := range []string{".", "../../sdk"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			b, err := os.ReadFile(path)
			sources = append(sources, string(b))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	blocks := goBlocks(string(doc))
	if len(blocks) < 5 {
		t.Fatalf("found %d Go blocks in docs/executor-sdk.md, want the page's examples", len(blocks))
	}
	for _, b := range blocks {
		found := false
		for _, src := range sources {
			found = found || strings.Contains(src, b.code)
		}
		if !found {
			t.Errorf("docs/executor-sdk.md:%d: this Go block is in no file of examples/checklist or sdk; copy it from the code, or put the code in the example:\n%s", b.line, b.code)
		}
	}
}

type block struct {
	line int
	code string
}

// goBlocks returns the fenced ```go blocks of a Markdown page.
func goBlocks(doc string) []block {
	var out []block
	var cur *block
	var b strings.Builder
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur = &block{line: i + 2}
			b.Reset()
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.code = b.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			b.WriteString(l + "\n")
		}
	}
	return out
}

// TestDocShowsWholeConformanceTest checks that the page shows this
// module's conformance test as the whole file, helpers included, so that
// a reader can copy it and have it compile.
func TestDocShowsWholeConformanceTest(t *testing.T) {
	doc, err := os.ReadFile("../../docs/executor-sdk.md")
	if err != nil {
		t.Skipf("not in the taskhost repository: %v", err)
	}
	file, err := os.ReadFile("checklist_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range goBlocks(string(doc)) {
		if b.code == string(file) {
			return
		}
	}
	t.Errorf("docs/executor-sdk.md has no Go block that is the whole of examples/checklist/checklist_test.go; copy the file into section 8")
}
