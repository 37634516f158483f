package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxScriptBytes bounds an interpreted executor's script: the host reads it
// whole to hash it and hands the interpreter a sealed copy.
const MaxScriptBytes = 16 << 20

// scriptFD is the fd number the interpreter reads its script from: the
// first of the trampoline's ExtraFiles, inherited by the interpreter.
const scriptFD = 3

// scriptArg is the interpreter's script argument: the sealed copy, by fd.
var scriptArg = fmt.Sprintf("/proc/self/fd/%d", scriptFD)

// openInterpreted opens an interpreted executor: its interpreter, checked
// like a plugin binary (an executable file, hashed from the returned file
// when pinned, exec'd from it), and its script, read once and hashed, whose
// bytes are returned in a sealed memfd. The interpreter reads the script
// from that memfd, so what runs is exactly what was hashed: a path swapped
// after the hash, or the file rewritten in place, changes nothing. The
// caller closes both files.
func openInterpreted(spec PluginSpec) (interp, script *os.File, err error) {
	ispec := PluginSpec{Kind: spec.Kind, Path: spec.Interpreter, SHA256: spec.InterpreterSHA256}
	interp, err = openBinary(ispec)
	if err != nil {
		var ue *UnavailableError
		if errors.As(err, &ue) {
			ue.Detail = "interpreter: " + ue.Detail + fmt.Sprintf(" ([executors.%s] interpreter, interpreter_sha256)", spec.Kind)
		}
		return nil, nil, err
	}
	if s, err := isScript(interp); err != nil || s {
		interp.Close()
		return nil, nil, &UnavailableError{Kind: spec.Kind, Check: "binary", Detail: fmt.Sprintf("interpreter %s is a script, not an executable binary: name the binary its #! line runs", spec.Interpreter)}
	}
	script, err = readScript(spec)
	if err != nil {
		interp.Close()
		return nil, nil, err
	}
	return interp, script, nil
}

// readScript reads spec's script (at most MaxScriptBytes), checks its pin,
// and returns its bytes in a sealed memfd.
func readScript(spec PluginSpec) (*os.File, error) {
	unavailable := func(check, format string, a ...any) (*os.File, error) {
		return nil, &UnavailableError{Kind: spec.Kind, Check: check, Detail: fmt.Sprintf(format, a...)}
	}
	f, err := os.Open(spec.Path)
	if err != nil {
		return unavailable("binary", "script %s: %v (fix [executors.%s] path)", spec.Path, errors.Unwrap(err), spec.Kind)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return unavailable("binary", "script %s: %v", spec.Path, err)
	} else if !fi.Mode().IsRegular() {
		return unavailable("binary", "script %s is not a regular file (mode %s)", spec.Path, fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return unavailable("binary", "script %s: %v", spec.Path, err)
	}
	if len(data) > MaxScriptBytes {
		return unavailable("binary", "script %s is larger than %d bytes, the limit of an interpreted executor's script", spec.Path, MaxScriptBytes)
	}
	if spec.SHA256 != "" {
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != spec.SHA256 {
			return unavailable("checksum", "script %s has SHA-256 %s, config pins %s ([executors.%s] sha256)", spec.Path, got, spec.SHA256, spec.Kind)
		}
	}
	mf, err := sealedCopy(data)
	if err != nil {
		return unavailable("binary", "script %s: a sealed copy: %v", spec.Path, err)
	}
	return mf, nil
}

// sealedCopy returns data in a memfd that nobody can change any more.
func sealedCopy(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("taskhost-script", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "taskhost-script")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
