package tools

import (
	"cmp"
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// A workspace can also be exported as the task store holds it (as of its
// task's last committed step) rather than from a host's disk: a host that
// does not hold a task's run has no copy of it, or a stale one. The store
// keeps regular files and symlinks, no directories and no modification
// times; the listing and the refusals are those of ListExport and
// OpenExport over the same tree.

// StoredFile is one file of a stored workspace.
type StoredFile struct {
	Path    string // relative, slash-separated, clean
	Symlink bool
	Size    int64
}

// ListStored is ListExport over files: the entries under directory p,
// depth first in path order as ListExport walks them, with the
// directories the files' paths imply, and the same bounds. A path through
// a symlink is refused; an empty workspace lists as empty.
func ListStored(ctx context.Context, files []StoredFile, p string) ([]ExportEntry, bool, error) {
	return listStored(ctx, files, p, MaxExportEntries, MaxExportListBytes)
}

func listStored(ctx context.Context, files []StoredFile, p string, maxEntries, maxBytes int) ([]ExportEntry, bool, error) {
	rel := "."
	if p != "" && p != "." {
		var err error
		if rel, err = cleanPath(p); err != nil {
			return nil, false, refusePath(p, "%v", err)
		}
	}
	byPath := map[string]ExportEntry{}
	for _, f := range files {
		e := ExportEntry{Path: f.Path, Type: "file", Size: f.Size}
		if f.Symlink {
			e = ExportEntry{Path: f.Path, Type: "symlink"}
		}
		byPath[f.Path] = e
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			byPath[d] = ExportEntry{Path: d, Type: "dir"}
		}
	}
	if rel != "." {
		if err := checkStoredWay(byPath, p, rel); err != nil {
			return nil, false, err
		}
		switch e, ok := byPath[rel]; {
		case !ok:
			return nil, false, fs.ErrNotExist
		case e.Type != "dir":
			return nil, false, refusePath(p, "is not a directory")
		}
	}
	var under []ExportEntry
	for name, e := range byPath {
		if rel == "." || strings.HasPrefix(name, rel+"/") {
			under = append(under, e)
		}
	}
	slices.SortFunc(under, func(a, b ExportEntry) int { return walkOrder(a.Path, b.Path) })
	var entries []ExportEntry
	bytes := 0
	for _, e := range under {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if len(entries) == maxEntries || bytes+len(e.Path) > maxBytes {
			return entries, true, nil
		}
		bytes += len(e.Path)
		entries = append(entries, e)
	}
	return entries, false, nil
}

// FindStored is OpenExport's check over files: the regular file p, or an
// *ExportPathError (the workspace itself, a directory, a symlink at p or
// on the way to it), or fs.ErrNotExist.
func FindStored(files []StoredFile, p string) (StoredFile, error) {
	if p == "" || p == "." {
		return StoredFile{}, refusePath(p, "is the workspace itself: give a file's path")
	}
	rel, err := cleanPath(p)
	if err != nil {
		return StoredFile{}, refusePath(p, "%v", err)
	}
	byPath := map[string]ExportEntry{}
	var found *StoredFile
	for i, f := range files {
		t := "file"
		if f.Symlink {
			t = "symlink"
		}
		byPath[f.Path] = ExportEntry{Path: f.Path, Type: t}
		if f.Path == rel {
			found = &files[i]
		}
		if strings.HasPrefix(f.Path, rel+"/") {
			return StoredFile{}, refusePath(p, "is a directory: list it instead")
		}
	}
	if err := checkStoredWay(byPath, p, rel); err != nil {
		return StoredFile{}, err
	}
	if found == nil {
		return StoredFile{}, fs.ErrNotExist
	}
	return *found, nil
}

// checkStoredWay refuses rel when it, or a directory on the way to it, is
// a symlink of the stored tree, as openExport does on disk.
func checkStoredWay(byPath map[string]ExportEntry, p, rel string) error {
	cur := ""
	for seg := range strings.SplitSeq(rel, "/") {
		cur = path.Join(cur, seg)
		if e, ok := byPath[cur]; !ok || e.Type != "symlink" {
			continue
		}
		if cur == rel {
			return refusePath(p, "is a symlink: symlinks are not exported")
		}
		return refusePath(p, "goes through the symlink %q: symlinks are not followed", cur)
	}
	return nil
}

// walkOrder orders paths as fs.WalkDir visits them: segment by segment, a
// directory before what it holds.
func walkOrder(a, b string) int {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := range min(len(as), len(bs)) {
		if c := cmp.Compare(as[i], bs[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(as), len(bs))
}
