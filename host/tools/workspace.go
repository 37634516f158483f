package tools

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// maxSymlinks bounds the symlinks followed while resolving one path, as
// the kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// Resolution failures that are the path argument's fault.
var (
	errEscapes     = errors.New("leads out of the workspace")
	errSymlinkLoop = errors.New("has too many levels of symbolic links")
)

// cleanPath checks a workspace path argument as text and returns it
// cleaned. It refuses what no workspace path needs: an absolute path, a ".."
// segment (even one that would stay inside: the model has no reason to
// write one, and refusing is simpler to reason about), a NUL byte, and more
// than MaxPathBytes. Symlinks are resolve's business.
func cleanPath(p string) (string, error) {
	switch {
	case len(p) > MaxPathBytes:
		return "", fmt.Errorf("is %d bytes; the limit is %d", len(p), MaxPathBytes)
	case p == "":
		return "", errors.New("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", errors.New("contains a NUL byte")
	case strings.HasPrefix(p, "/"):
		return "", errors.New("must be relative to the workspace, not absolute")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", errors.New(`must not contain a ".." segment`)
		}
	}
	return path.Clean(p), nil
}

// resolve follows the symlinks of a cleaned workspace path inside root and
// returns the path it leads to, relative to root and free of symlinks
// (components that do not exist yet are kept as they are). It returns
// errEscapes if a symlink leads out of the workspace: a relative target
// climbing above it, or an absolute target not under one of the workspace's
// own absolute names (prefixes).
//
// resolve gives a clear refusal and lets writes go through in-workspace
// symlinks to their targets. It is not what keeps a tool inside the
// workspace: the operations on its result go through root, which refuses
// an escape by itself even if the tree changes in between.
func resolve(root *os.Root, prefixes []string, rel string) (string, error) {
	todo := strings.Split(rel, "/")
	var done []string
	links := 0
	for len(todo) > 0 {
		seg := todo[0]
		todo = todo[1:]
		switch seg {
		case "", ".":
			continue
		case "..": // only from a symlink target; cleanPath refuses them
			if len(done) == 0 {
				return "", errEscapes
			}
			done = done[:len(done)-1]
			continue
		}
		cur := strings.Join(append(done[:len(done):len(done)], seg), "/")
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			done = append(done, seg)
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, seg)
			continue
		}
		if links++; links > maxSymlinks {
			return "", errSymlinkLoop
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			rest, ok := under(prefixes, path.Clean(target))
			if !ok {
				return "", errEscapes
			}
			done, target = nil, rest
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return strings.Join(done, "/"), nil
}

// under reports whether the absolute path p is one of prefixes or below
// one, and returns the rest of it.
func under(prefixes []string, p string) (string, bool) {
	for _, pre := range prefixes {
		if p == pre {
			return ".", true
		}
		if rest, ok := strings.CutPrefix(p, pre+"/"); ok {
			return rest, true
		}
	}
	return "", false
}

// pathArg returns a cleaned path argument; an optional path that is
// missing or empty is the workspace itself, ".".
func (c *call) pathArg(field string, required bool) (string, error) {
	var p string
	present, err := c.decode(field, "a string", &p)
	if err = c.required(field, present || !required, err); err != nil {
		return "", err
	}
	if !required && p == "" {
		return ".", nil
	}
	clean, err := cleanPath(p)
	if err != nil {
		return "", c.argErr(field, "%v", err)
	}
	return clean, nil
}

// openPath opens the task's workspace and resolves a cleaned path in it.
// The caller closes the returned Root.
func (c *call) openPath(field, rel string) (*os.Root, string, error) {
	root, err := c.r.openWorkspace(c.taskID)
	if err != nil {
		return nil, "", err
	}
	prefixes := []string{c.ws}
	// A shell's $PWD and absolute symlinks made from it carry the
	// physical name of the workspace, which differs when the data
	// directory is reached through a symlink.
	if real, err := filepath.EvalSymlinks(c.ws); err == nil && real != c.ws {
		prefixes = append(prefixes, real)
	}
	res, err := resolve(root, prefixes, rel)
	if err != nil {
		root.Close()
		if errors.Is(err, errEscapes) || errors.Is(err, errSymlinkLoop) {
			return nil, "", c.argErr(field, "%v", err)
		}
		return nil, "", err
	}
	return root, res, nil
}

// failure sorts an error of a workspace tool: a bad argument stays a Go
// error (*ArgError); what the model caused or can fix (a missing file, a
// file where a directory should be) becomes an IsError result naming the
// path it gave; anything else is the host's problem and stays a Go error.
func failure(p string, err error) (Result, error) {
	if _, ok := errors.AsType[*ArgError](err); ok {
		return Result{}, err
	}
	var msg string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		msg = "no such file or directory"
	case errors.Is(err, syscall.ENOTDIR):
		msg = "not a directory"
	case errors.Is(err, syscall.EISDIR):
		msg = "is a directory"
	case errors.Is(err, fs.ErrPermission):
		msg = "permission denied"
	case errors.Is(err, syscall.ENAMETOOLONG):
		msg = "file name too long"
	case errors.Is(err, syscall.ELOOP):
		msg = "too many levels of symbolic links"
	default:
		return Result{}, err
	}
	return errorResult(p + ": " + msg), nil
}

// errorResult is the IsError result of a failure the model should see.
func errorResult(msg string) Result {
	return Result{Output: mustJSON(struct {
		Error string `json:"error"`
	}{msg}), IsError: true}
}

// mustJSON encodes a value of this package's own result types, which
// cannot fail to encode.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("tools: encoding a result: %v", err))
	}
	return string(b)
}

func bindRead(c *call) (action, error) {
	p, err := c.pathArg("path", true)
	if err != nil {
		return nil, err
	}
	var offset, limit int64
	if _, err := c.decode("offset", "a non-negative integer", &offset); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, c.argErr("offset", "must be a non-negative integer")
	}
	hasLimit, err := c.decode("limit", "a non-negative integer", &limit)
	if err != nil {
		return nil, err
	}
	if limit < 0 || limit > MaxReadBytes {
		return nil, c.argErr("limit", "is %d; it must be in 0..%d", limit, MaxReadBytes)
	}
	return func(context.Context) (Result, error) {
		root, rel, err := c.openPath("path", p)
		if err != nil {
			return failure(p, err)
		}
		defer root.Close()
		// O_NONBLOCK: opening a FIFO would otherwise block until a writer
		// appears, beyond any timeout. It changes nothing for a regular file.
		f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return failure(p, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return Result{}, err
		}
		if fi.IsDir() {
			return errorResult(p + ": is a directory; use workspace.list"), nil
		}
		if !fi.Mode().IsRegular() {
			return errorResult(p + ": not a regular file"), nil
		}
		size := fi.Size()
		n := max(size-offset, 0)
		if hasLimit {
			n = min(n, limit)
		} else if n > MaxReadBytes {
			return Result{}, c.argErr("limit", "is needed: the file has %d bytes from offset %d and a read returns at most %d; read it in pieces with offset and limit",
				n, offset, MaxReadBytes)
		}
		buf := make([]byte, n)
		k, err := io.ReadFull(io.NewSectionReader(f, offset, n), buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return failure(p, err) // the file shrank or the read failed
		}
		buf = buf[:k]
		out := struct {
			Content  string `json:"content"`
			Size     int64  `json:"size"`
			Encoding string `json:"encoding,omitempty"`
		}{Content: string(buf), Size: size}
		// JSON strings hold text: anything else would be mangled into
		// U+FFFD, so it goes out as base64 and says so.
		if !utf8.Valid(buf) {
			out.Content, out.Encoding = base64.StdEncoding.EncodeToString(buf), "base64"
		}
		return Result{Output: mustJSON(out)}, nil
	}, nil
}

func bindWrite(c *call) (action, error) {
	p, err := c.pathArg("path", true)
	if err != nil {
		return nil, err
	}
	var content string
	present, err := c.decode("content", "a string", &content)
	if err = c.required("content", present, err); err != nil {
		return nil, err
	}
	if len(content) > MaxWriteBytes {
		return nil, c.argErr("content", "is %d bytes; the limit is %d per write", len(content), MaxWriteBytes)
	}
	var appendMode bool
	if _, err := c.decode("append", "a boolean", &appendMode); err != nil {
		return nil, err
	}
	if p == "." {
		return nil, c.argErr("path", "names the workspace itself, not a file")
	}
	return func(ctx context.Context) (Result, error) {
		root, rel, err := c.openPath("path", p)
		if err != nil {
			return failure(p, err)
		}
		defer root.Close()
		if rel == "." {
			return Result{}, c.argErr("path", "leads to the workspace itself, not a file")
		}
		lock := c.r.writeLock(c.taskID)
		lock.Lock()
		defer lock.Unlock()
		return c.writeFile(ctx, root, p, rel, content, appendMode)
	}, nil
}

// writeFile replaces (or extends) rel atomically: the new content goes to a
// temporary file in the same directory, which is renamed over rel. A rename
// replaces the directory entry and never writes through it, so even a
// symlink swapped in at the last moment cannot redirect the write.
func (c *call) writeFile(ctx context.Context, root *os.Root, p, rel, content string, appendMode bool) (Result, error) {
	dir := path.Dir(rel)
	if dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return failure(p, err)
		}
	}
	t, res, err := c.writeTargetOf(root, p, rel)
	if res != nil || err != nil {
		return *res, err
	}
	if c.key != "" {
		kw := newKeyedWrite(c.key, content, appendMode)
		done, err := kw.applied(t.keys)
		if err != nil {
			return Result{}, c.argErr("idempotency_key", "%v", err)
		}
		if done {
			return Result{Output: mustJSON(struct {
				Written      int  `json:"written"`
				Deduplicated bool `json:"deduplicated"`
			}{len(content), true})}, nil
		}
		t.keys = append(t.keys, kw.line())
	}
	size := int64(len(content))
	if appendMode {
		size += t.old
	}
	used, err := usage(ctx, root)
	if err != nil {
		return Result{}, fmt.Errorf("measure workspace: %w", err)
	}
	if total := used - t.old + size; total > MaxWorkspaceBytes {
		return Result{}, c.argErr("content", "would bring the workspace to %d bytes; the limit is %d", total, MaxWorkspaceBytes)
	}
	if !appendMode {
		t.old = 0 // nothing of it is copied
	}
	if res, err := c.replaceFile(root, p, rel, content, t); res != nil || err != nil {
		return *res, err
	}
	return Result{Output: mustJSON(struct {
		Written int `json:"written"`
	}{len(content)})}, nil
}

// writeTarget is what a write keeps of the file it replaces: its size
// (the bytes an append copies), its mode and its idempotency keys.
type writeTarget struct {
	old  int64
	mode fs.FileMode
	keys []string
}

// writeTargetOf reads the file at rel a write replaces, if any. A result
// is the model's error (a directory, not a regular file); an error, the
// call's.
func (c *call) writeTargetOf(root *os.Root, p, rel string) (writeTarget, *Result, error) {
	t := writeTarget{mode: 0o600}
	fail := func(res Result, err error) (writeTarget, *Result, error) { return t, &res, err }
	fi, err := root.Lstat(rel)
	switch {
	case err == nil && fi.Mode().IsRegular():
		t.old, t.mode = fi.Size(), fi.Mode().Perm()
	case err == nil && fi.IsDir():
		return fail(errorResult(p+": is a directory"), nil)
	case err == nil:
		return fail(errorResult(p+": not a regular file"), nil)
	case !errors.Is(err, fs.ErrNotExist):
		return fail(failure(p, err))
	default:
		return t, nil, nil
	}
	// The file's idempotency keys go with every write of it, keyed or
	// not, so a keyed write repeated after others is still known.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail(failure(p, err))
	}
	t.keys, err = fileKeys(f)
	f.Close()
	// Only a keyed write depends on them; an unkeyed one goes on
	// without (the file then forgets its keys).
	if err != nil && c.key != "" {
		return fail(Result{}, fmt.Errorf("read the idempotency keys of %s: %w", p, err))
	}
	return t, nil, nil
}

// replaceFile writes a temporary file in rel's directory — t.old bytes of
// rel, then content, with t's mode and keys — syncs it and renames it over
// rel. A result or an error is the write's failure, and nothing changed.
func (c *call) replaceFile(root *os.Root, p, rel, content string, t writeTarget) (*Result, error) {
	fail := func(res Result, err error) (*Result, error) { return &res, err }
	tmpName := path.Join(path.Dir(rel), ".taskhost-"+rand.Text()+".tmp")
	tmp, err := root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(failure(p, err))
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			root.Remove(tmpName)
		}
	}()
	if t.old > 0 {
		src, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fail(failure(p, err))
		}
		// Copy no more than was measured, so a file growing meanwhile
		// cannot take the workspace past its limit.
		_, err = io.Copy(tmp, io.LimitReader(src, t.old))
		src.Close()
		if err != nil {
			return fail(Result{}, fmt.Errorf("copy for append: %w", err))
		}
	}
	if _, err := tmp.WriteString(content); err != nil {
		return fail(Result{}, fmt.Errorf("write: %w", err))
	}
	// Keep the mode of the file being replaced (a script made executable
	// stays executable); the umask must not change it either.
	if err := tmp.Chmod(t.mode); err != nil {
		return fail(Result{}, fmt.Errorf("chmod: %w", err))
	}
	if err := setFileKeys(tmp, t.keys); err != nil && c.key != "" {
		return fail(Result{}, fmt.Errorf("record the idempotency keys of %s: %w", p, err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(Result{}, fmt.Errorf("sync: %w", err))
	}
	if err := tmp.Close(); err != nil {
		return fail(Result{}, fmt.Errorf("close: %w", err))
	}
	if err := root.Rename(tmpName, rel); err != nil {
		return fail(failure(p, err))
	}
	committed = true
	return nil, nil
}

// usage returns the total size of the regular files in the workspace.
// Symlinks are not followed, so nothing outside is counted. The walk is
// the one part of a workspace tool whose time grows with the workspace
// (a shell may have made many files), so it stops when ctx ends.
func usage(ctx context.Context, root *os.Root) (int64, error) {
	var total int64
	err := fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

type listEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink or other
	Size int64  `json:"size"` // bytes, for files; 0 otherwise
}

func bindList(c *call) (action, error) {
	p, err := c.pathArg("path", false)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (Result, error) {
		root, rel, err := c.openPath("path", p)
		if err != nil {
			return failure(p, err)
		}
		defer root.Close()
		d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return failure(p, err)
		}
		defer d.Close()
		fi, err := d.Stat()
		if err != nil {
			return Result{}, err
		}
		if !fi.IsDir() {
			return errorResult(p + ": not a directory"), nil
		}
		// Read one more than the limit to know whether there are more.
		// Which entries a truncated listing holds is unspecified: sorting
		// them all would mean reading a directory of any size.
		des, err := d.ReadDir(MaxListEntries + 1)
		if err != nil && !errors.Is(err, io.EOF) {
			return failure(p, err)
		}
		truncated := len(des) > MaxListEntries
		des = des[:min(len(des), MaxListEntries)]
		slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		entries := make([]listEntry, 0, len(des))
		for _, de := range des {
			e := listEntry{Name: de.Name(), Type: "other"}
			switch t := de.Type(); {
			case t.IsRegular():
				e.Type = "file"
				if info, err := de.Info(); err == nil {
					e.Size = info.Size()
				}
			case t.IsDir():
				e.Type = "dir"
			case t&fs.ModeSymlink != 0:
				e.Type = "symlink"
			}
			entries = append(entries, e)
		}
		return Result{Output: mustJSON(struct {
			Entries   []listEntry `json:"entries"`
			Truncated bool        `json:"truncated"`
		}{entries, truncated})}, nil
	}, nil
}
