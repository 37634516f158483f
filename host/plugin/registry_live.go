package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// binStamp identifies what a kind's process execs, on disk, without
// reading it: its binary (an interpreted executor's script) and its
// interpreter, if any.
type binStamp struct{ bin, interp fileStamp }

// fileStamp identifies a file's content on disk without reading it: a
// rebuild, a copy over it or a rename onto its path changes at least one
// field (ctime cannot be set back by a user).
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// specStamp stamps spec's binary and its interpreter: either changing
// (python3 upgraded under a pinned script) makes the kind's preflight run
// again.
func specStamp(spec PluginSpec) (binStamp, error) {
	bin, err := stampOf(spec.Path)
	if err != nil || spec.Interpreter == "" {
		return binStamp{bin: bin}, err
	}
	interp, err := stampOf(spec.Interpreter)
	return binStamp{bin: bin, interp: interp}, err
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}, nil
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, nil
}

// Check is Describe against the binary on disk now: when kind's binary has
// changed since it was last checked (rebuilt, replaced, removed), its
// preflight runs again — the SHA-256 pin, the handshake and Describe — and
// the verdict replaces the registered one, for Describe and Launch too. An
// unchanged binary costs one stat. Create and resume call it, so that a
// task is refused (not created, not moved) while its executor cannot run.
func (r *Registry) Check(ctx context.Context, kind string) (Description, error) {
	r.mu.Lock()
	spec, ok := r.specs[kind]
	old, probed := r.stamps[kind]
	err := r.errs[kind]
	r.mu.Unlock()
	var ue *UnavailableError
	if !ok || (errors.As(err, &ue) && ue.Check == "disabled") {
		return r.Describe(kind)
	}
	now, serr := specStamp(spec)
	if serr == nil && probed && now == old {
		return r.Describe(kind)
	}
	// One re-check at a time: the rest then find the new stamp.
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	r.mu.Lock()
	cur, ok := r.specs[kind]
	old, probed = r.stamps[kind]
	r.mu.Unlock()
	if !ok || !samePin(cur, spec) {
		return r.Describe(kind) // reloaded meanwhile
	}
	if serr == nil && probed && now == old {
		return r.Describe(kind)
	}
	var desc Description
	if serr != nil {
		path := spec.Path
		var pe *fs.PathError
		if errors.As(serr, &pe) {
			path = pe.Path // the interpreter, maybe
		}
		err = &UnavailableError{Kind: kind, Check: "binary", Detail: fmt.Sprintf("plugin binary %s: %v", path, errors.Unwrap(serr))}
	} else {
		desc, err = r.probe(ctx, spec)
	}
	defer r.pool.refresh() // after the unlock
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.specs[kind]; !ok || !samePin(s, spec) {
		return desc, err // a reload replaced kind while it was probed: its verdict stands
	}
	r.setVerdict(kind, now, serr == nil, desc, err)
	if err != nil {
		r.opts.Logger.Warn("executor unavailable: its binary changed", "kind", kind, "error", err)
	} else {
		r.opts.Logger.Info("executor binary changed and passed its preflight", "kind", kind, "version", desc.Version)
	}
	return desc, err
}

// setVerdict records kind's preflight result for the binary stamped st.
// Called with mu held.
func (r *Registry) setVerdict(kind string, st binStamp, stamped bool, desc Description, err error) {
	r.gens[kind]++
	delete(r.descs, kind)
	delete(r.errs, kind)
	delete(r.stamps, kind)
	if stamped {
		r.stamps[kind] = st
	}
	if err != nil {
		r.errs[kind] = err
		return
	}
	r.descs[kind] = desc
}

// Reload replaces every registered kind by specs (disabled names the kinds
// to keep unavailable, with why): each is probed as Register does, then all
// verdicts are swapped in at once. Running plugins are not touched: each
// keeps the binary it was started from until its run ends. Kinds no longer
// configured are gone afterwards.
func (r *Registry) Reload(ctx context.Context, specs []PluginSpec, disabled map[string]string) {
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	type verdict struct {
		spec    PluginSpec
		st      binStamp
		stamped bool
		desc    Description
		err     error
	}
	vs := make([]verdict, 0, len(specs))
	for _, s := range specs {
		st, serr := specStamp(s)
		desc, err := r.probe(ctx, s)
		vs = append(vs, verdict{spec: s, st: st, stamped: serr == nil, desc: desc, err: err})
	}
	defer r.pool.refresh() // after the unlock
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs, r.descs, r.errs, r.stamps = map[string]PluginSpec{}, map[string]Description{}, map[string]error{}, map[string]binStamp{}
	for _, v := range vs {
		r.specs[v.spec.Kind] = v.spec
		r.setVerdict(v.spec.Kind, v.st, v.stamped, v.desc, v.err)
	}
	for kind, detail := range disabled {
		r.gens[kind]++
		delete(r.descs, kind)
		r.errs[kind] = &UnavailableError{Kind: kind, Check: "disabled", Detail: detail}
	}
}

// samePin says whether a and b run the same pinned files.
func samePin(a, b PluginSpec) bool {
	return a.Path == b.Path && a.SHA256 == b.SHA256 && a.Interpreter == b.Interpreter && a.InterpreterSHA256 == b.InterpreterSHA256
}
