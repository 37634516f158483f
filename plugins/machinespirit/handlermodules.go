package machinespirit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Bounds of operator handler modules. 128 KiB of source fits one worker
// frame (1 MiB) however JSON escapes it (at most 6 bytes a byte).
const (
	MaxHandlerModules     = 16
	MaxHandlerModuleBytes = 128 << 10
)

// HandlerModule is an operator's Prolog handler module: an absolute path
// and the lowercase hex SHA-256 of the file.
type HandlerModule struct {
	Path   string
	SHA256 string
}

// opModule is a handler module verified against its pin; its bytes are
// kept so that every worker loads exactly what was hashed, never the path
// opened again.
type opModule struct {
	path   string
	sha256 string
	source string
}

// moduleSummary is Describe's handler_modules entry: each module's base
// name and pin, in load order.
func moduleSummary(mods []opModule) string {
	parts := make([]string, len(mods))
	for i, m := range mods {
		parts[i] = filepath.Base(m.path) + "=" + m.sha256
	}
	return strings.Join(parts, ",")
}

// readHandlerModules reads each module once and checks its pin. Anything
// wrong fails the preflight (check handler_module), naming the file.
func readHandlerModules(mods []HandlerModule) ([]opModule, error) {
	if len(mods) > MaxHandlerModules {
		return nil, failCheck("handler_module", "%d handler modules, at most %d", len(mods), MaxHandlerModules)
	}
	seen := map[string]bool{}
	var out []opModule
	for i, m := range mods {
		if !filepath.IsAbs(m.Path) || filepath.Clean(m.Path) != m.Path {
			return nil, failCheck("handler_module", "handler_modules[%d].path %q: must be a clean absolute path", i, truncate(m.Path, 200))
		}
		if seen[m.Path] {
			return nil, failCheck("handler_module", "%s is named twice", m.Path)
		}
		seen[m.Path] = true
		if !sha256HexRE.MatchString(m.SHA256) {
			return nil, failCheck("handler_module", "%s: pin %q is not a lowercase hex SHA-256", m.Path, truncate(m.SHA256, 80))
		}
		b, err := readSmallFile(m.Path, MaxHandlerModuleBytes)
		if err != nil {
			return nil, failCheck("handler_module", "%w", err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != m.SHA256 {
			return nil, failCheck("handler_module", "%s has SHA-256 %s, pinned %s", m.Path, got, m.SHA256)
		}
		if !utf8.Valid(b) || strings.ContainsRune(string(b), 0) {
			return nil, failCheck("handler_module", "%s: not UTF-8 text without NUL", m.Path)
		}
		out = append(out, opModule{path: m.Path, sha256: m.SHA256, source: string(b)})
	}
	return out, nil
}

// loadHandlerModules loads the modules into a worker, before its operator
// graphs (which may name their handlers). Frame ids 1..len(mods).
func loadHandlerModules(ctx context.Context, w *worker, mods []opModule) error {
	for i, m := range mods {
		id := int64(i + 1)
		if err := w.send(loadModuleFrame{Type: "load_module", ID: id, Name: m.path, Source: m.source}); err != nil {
			return failCheck("handler_module", "%s: %w", m.path, err)
		}
		f, err := w.recv(ctx)
		if err != nil {
			return failCheck("handler_module", "%s: %w", m.path, err)
		}
		if f.Type != "module_loaded" || f.ID == nil || *f.ID != id {
			return failCheck("handler_module", "%s: unexpected %s frame", m.path, f.Type)
		}
		if !*f.OK {
			return failCheck("handler_module", "%s", truncate(f.Message, 1000))
		}
	}
	return nil
}
