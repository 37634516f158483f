package machinespirit

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// prologSources are the worker's Prolog sources. They belong to the plugin:
// the worker runs exactly these (compiled into a saved state at start-up),
// and their digest is reported by Describe.
//
//go:embed prolog/*.pl
var prologSources embed.FS

// mainSource is the file swipl loads; it loads the others.
const mainSource = "main.pl"

// sourceSet is a set of Prolog files by base name.
type sourceSet map[string][]byte

// embeddedSources returns the plugin's sources plus extra (test-only
// trusted sources), which may not replace an embedded file.
func embeddedSources(extra map[string][]byte) (sourceSet, error) {
	set := sourceSet{}
	err := fs.WalkDir(prologSources, "prolog", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := prologSources.ReadFile(path)
		if err != nil {
			return err
		}
		set[filepath.Base(path)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading embedded sources: %w", err)
	}
	for name, b := range extra {
		if _, ok := set[name]; ok {
			return nil, fmt.Errorf("extra source %q would replace an embedded one", name)
		}
		set[name] = b
	}
	return set, nil
}

// digest is the SHA-256 over the files in name order, each as
// "<name>\n<length>\n<content>", so that moving bytes from one file to the
// next changes it.
func (s sourceSet) digest() string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(s)) {
		h.Write([]byte(name + "\n" + strconv.Itoa(len(s[name])) + "\n"))
		h.Write(s[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// extras are the files swipl must be given besides main.pl (main.pl
// loads the embedded ones itself).
func (s sourceSet) extras() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s)) {
		if _, err := prologSources.Open("prolog/" + name); err != nil {
			out = append(out, name)
		}
	}
	return out
}

// stage writes the sources into dir, read-only.
func (s sourceSet) stage(dir string) error {
	for name, b := range s {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o444); err != nil {
			return fmt.Errorf("staging %s: %w", name, err)
		}
	}
	return nil
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
