package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// wantsJSON reports whether a command line asks for --json anywhere before a
// "--" terminator: then every failure of the command, a usage mistake
// included, is one errorView object on stderr (docs/cli.md, "Errors"),
// whichever part of the CLI caught it.
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		if !hasValue {
			return true
		}
		b, err := strconv.ParseBool(value)
		return err == nil && b
	}
	return false
}

// finish ends a command that returned code. With --json, the messages
// errorf held back become one errorView object, unless the command
// succeeded or already wrote its own (an API error): those are printed as
// the plain lines they are.
func (e *env) finish(code int) int {
	msgs := e.failures
	e.failures = nil
	if len(msgs) == 0 {
		return code
	}
	if code == exitOK || e.jsonFailed {
		for _, m := range msgs {
			fmt.Fprintln(e.stderr, "taskhost: "+m)
		}
		return code
	}
	var v errorView
	v.Error.Code = exitCodeName(code)
	v.Error.Message = strings.Join(msgs, "; ")
	v.ExitCode = code
	data, _ := json.Marshal(v)
	fmt.Fprintln(e.stderr, string(data))
	return code
}

// exitCodeName is errorView's code for a failure caught in the CLI itself,
// named after the gRPC code an API call would have failed with.
func exitCodeName(code int) string {
	switch code {
	case exitUsage:
		return "usage"
	case exitNotFound:
		return "not_found"
	case exitConflict:
		return "failed_precondition"
	case exitUnavailable:
		return "unavailable"
	case exitDenied:
		return "permission_denied"
	case exitSignal:
		return "canceled"
	}
	return "internal"
}
