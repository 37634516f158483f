package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
)

// maxDiffShown bounds the diff an approval of a workspace write shows, as
// escaped for a terminal: with the path and the host's notes it stays within
// the approval record's 2000 bytes. A longer diff ends in "…(+N bytes)".
const maxDiffShown = 1400

// diffContext is how many unchanged lines a diff shows around its change.
const diffContext = 2

// writeDiff is what an approver of a workspace.write sees: the file's
// change as a unified diff, and the digest of the content it was computed
// against, so the write can be refused if the file changed before it ran.
type writeDiff struct {
	path, prompt, base string
}

// diffForApproval reads the file a workspace.write call would change, in
// the task's workspace, and returns the approval's view of the change. ok
// is false when args are not a write the tool would take: the tool then
// refuses them itself.
func diffForApproval(ctx context.Context, reg *tools.Registry, env tools.Env, args []byte) (writeDiff, bool) {
	var a struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if json.Unmarshal(args, &a) != nil || a.Path == "" {
		return writeDiff{}, false
	}
	old, shown := readForDiff(ctx, reg, env, a.Path)
	next := a.Content
	if a.Append {
		next = old + a.Content
	}
	d := writeDiff{path: a.Path, base: digest(old)}
	head := "workspace.write " + tools.Visible(a.Path) + ": "
	switch {
	case !shown:
		d.prompt = head + fmt.Sprintf("replaces a file the host cannot show as text (%d bytes of content written)", len(a.Content))
	default:
		d.prompt = head + tools.Printable(unifiedDiff(old, next), maxDiffShown)
	}
	return d, true
}

// readForDiff is the current text of path in the workspace, "" for a file
// that does not exist; shown is false for one that is not text or too
// large to read whole.
func readForDiff(ctx context.Context, reg *tools.Registry, env tools.Env, p string) (string, bool) {
	args, _ := json.Marshal(map[string]any{"path": p})
	res, err := reg.Call(ctx, env, tools.ToolWorkspaceRead, args)
	if err != nil {
		return "", false
	}
	var out struct {
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
		Error    string `json:"error"`
	}
	if json.Unmarshal([]byte(res.Output), &out) != nil {
		return "", false
	}
	if res.IsError {
		// A missing file is an empty base; anything else is not text.
		return "", strings.Contains(out.Error, "no such file")
	}
	return out.Content, out.Encoding == ""
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// checkBase refuses a write whose file changed after its diff was shown:
// the approver approved a change of the content they saw, not of another.
func checkBase(ctx context.Context, reg *tools.Registry, env tools.Env, d writeDiff) error {
	now, _ := readForDiff(ctx, reg, env, d.path)
	if digest(now) != d.base {
		return &plugin.ToolError{Err: fmt.Errorf("%s changed after its diff was approved: nothing written; write it again to be shown the new diff", d.path)}
	}
	return nil
}

// unifiedDiff is a one-hunk unified diff of old to next by lines: the
// common leading and trailing lines are kept out but for diffContext of
// them, and the lines between are shown removed, then added. It is not a
// minimal diff, but it shows every changed line, in order.
func unifiedDiff(old, next string) string {
	if old == next {
		return "(no change)"
	}
	a, b := splitLines(old), splitLines(next)
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	from, toA, toB := max(pre-diffContext, 0), len(a)-max(suf-diffContext, 0), len(b)-max(suf-diffContext, 0)
	var sb strings.Builder
	fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", from+1, toA-from, from+1, toB-from)
	for _, l := range a[from:pre] {
		sb.WriteString(" " + l + "\n")
	}
	for _, l := range a[pre : len(a)-suf] {
		sb.WriteString("-" + l + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		sb.WriteString("+" + l + "\n")
	}
	for _, l := range a[len(a)-suf : toA] {
		sb.WriteString(" " + l + "\n")
	}
	return sb.String()
}

// splitLines splits s into lines without their newlines; a last line
// without one is marked, as diff does.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	ls := strings.Split(s, "\n")
	if ls[len(ls)-1] == "" {
		return ls[:len(ls)-1]
	}
	ls[len(ls)-1] += `\ no newline at end of file`
	return ls
}
