package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// parseArgs parses args with fs, allowing flags before and after the
// positional arguments ("task status ID --json"), and checks their count.
// ok is false when the command must exit with code (2 after a usage error
// printed to stderr, 0 after --help).
func parseArgs(e *env, fs *flag.FlagSet, args []string, minArgs, maxArgs int) (pos []string, code int, ok bool) {
	if e.describe != nil {
		e.describe.describeFlags(fs)
		return nil, exitOK, false
	}
	// The flag package prints its complaint and the usage together: held
	// here, the complaint alone becomes the JSON error under --json.
	var out bytes.Buffer
	fs.SetOutput(&out)
	defer fs.SetOutput(e.stderr)
	// An id, a goal, a path: every argument ends up in a protobuf string
	// or a file name shown back, and neither holds invalid UTF-8. Refused
	// here as the usage error it is, not as an unavailable daemon.
	for i, a := range args {
		if !utf8.ValidString(a) {
			errorf(e, "%s: argument %d (%q) is not valid UTF-8", fs.Name(), i+1, a)
			return nil, exitUsage, false
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) || !e.jsonErrors {
				e.stderr.Write(out.Bytes()) //nolint:errcheck // best effort, as the flag package's own
				if errors.Is(err, flag.ErrHelp) {
					return nil, exitOK, false
				}
				return nil, exitUsage, false
			}
			errorf(e, "%s: %v", fs.Name(), err)
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		switch {
		case maxArgs == 0:
			errorf(e, "%s: unexpected argument %q", fs.Name(), pos[0])
		case len(pos) < minArgs:
			errorf(e, "%s: missing argument", fs.Name())
		default:
			errorf(e, "%s: too many arguments: %s", fs.Name(), strings.Join(pos, " "))
		}
		if !e.jsonErrors {
			fs.SetOutput(e.stderr)
			fs.Usage()
		}
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// usageFunc prints a command's usage line, description and flags.
func usageFunc(fs *flag.FlagSet, synopsis, description string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", synopsis, description)
		fs.PrintDefaults()
	}
}

// subcommand dispatches "taskhost GROUP SUB ..." to one of subs.
func subcommand(e *env, group string, subs []command, args []string, run func(c command, args []string) int) int {
	if e.describe != nil && len(args) == 1 {
		for _, c := range subs {
			e.describe.subs = append(e.describe.subs, cmdSpec{name: c.name})
		}
		return exitOK
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stderr
		code := exitUsage
		if len(args) > 0 {
			w, code = e.stdout, exitOK
		}
		subUsage(w, group, subs)
		return code
	}
	for _, c := range subs {
		if c.name == args[0] {
			return run(c, args[1:])
		}
	}
	errorf(e, "%s: unknown command %q", group, args[0])
	if !e.jsonErrors {
		fmt.Fprintln(e.stderr)
		subUsage(e.stderr, group, subs)
	}
	return exitUsage
}

func subUsage(w io.Writer, group string, subs []command) {
	fmt.Fprintf(w, "Usage: taskhost %s COMMAND [flags]\n\nCommands:\n", group)
	for _, c := range subs {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'taskhost %s COMMAND --help' for a command's flags.\n", group)
}
