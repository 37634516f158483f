package executortest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Interpreted says the executor under test is a script an interpreter
// runs, such as a Python executor on the Python SDK (sdk/python). The kit
// then registers Options.Binary (and OldBinary) as the script of an
// interpreted executor, pinned with its interpreter, as a user would
// ([executors.KIND] interpreter, interpreter_sha256, args, read_only).
type Interpreted struct {
	// Interpreter is the interpreter's absolute path, e.g. /usr/bin/python3.
	Interpreter string
	// Args are the script's arguments ([executors.KIND] args).
	Args []string
	// ReadOnly are the absolute paths the script reads besides the system's
	// ([executors.KIND] read_only): its SDK and libraries. Under a root
	// host they must be readable by others.
	ReadOnly []string
}

// validate checks in and makes its paths absolute.
func (in *Interpreted) validate() error {
	var errs []error
	if !filepath.IsAbs(in.Interpreter) {
		errs = append(errs, fmt.Errorf("Options.Interpreted.Interpreter = %q: an absolute path, e.g. /usr/bin/python3", in.Interpreter))
	} else if err := checkExecutable(in.Interpreter); err != nil {
		errs = append(errs, fmt.Errorf("Options.Interpreted.Interpreter: %w", err))
	}
	for i, p := range in.ReadOnly {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("Options.Interpreted.ReadOnly[%d] = %q: an absolute path", i, p))
		}
	}
	return errors.Join(errs...)
}

// checkScript checks that path is a readable regular file: a script needs
// no exec bit, the interpreter reads it.
func checkScript(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (mode %s)", path, fi.Mode())
	}
	return nil
}

// argv is how the executor binary is started outside the host: the
// binary itself, or the interpreter running it.
func (in *Interpreted) argv(binary string) []string {
	if in == nil {
		return []string{binary}
	}
	return append([]string{in.Interpreter, binary}, in.Args...)
}

// config is the [executors.KIND] keys of script besides path and sha256.
func (in *Interpreted) config(k *kit) (string, error) {
	sum, err := k.sha256(in.Interpreter)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "interpreter = %s\ninterpreter_sha256 = %q\n", tomlString(in.Interpreter), sum)
	fmt.Fprintf(&b, "args = %s\nread_only = %s\n", tomlList(in.Args), tomlList(in.ReadOnly))
	return b.String(), nil
}

func tomlList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
