package tools

import "strconv"

// Built-in tool names.
const (
	ToolWorkspaceRead  = "workspace.read"
	ToolWorkspaceWrite = "workspace.write"
	ToolWorkspaceList  = "workspace.list"
	ToolShellRun       = "shell.run"
	ToolTimeSleep      = "time.sleep"
)

// builtin is one built-in tool.
type builtin struct {
	spec    Spec
	fields  []string // the accepted arguments, sorted; Summarize prints only these
	maxArgs int
	// bind validates the arguments and returns the tool's work. It does no
	// I/O, so a refused call has touched nothing.
	bind func(c *call) (action, error)
	// honoursKey: the tool de-duplicates a call by its idempotency key
	// (Env.IdempotencyKey), so a call repeated with the same key has the
	// effect of one.
	honoursKey bool
}

// builtins returns the built-in tools. It builds them on each call so the
// package holds no mutable state.
func builtins() []builtin {
	return append(fileAndShellBuiltins(), taskBuiltins()...)
}

func fileAndShellBuiltins() []builtin {
	return []builtin{
		{
			spec: Spec{
				Name: ToolWorkspaceRead,
				Description: "Read a file of the task's workspace. Returns {\"content\", \"size\"} where size is the whole file's size; " +
					"at most " + strconv.Itoa(MaxReadBytes) + " bytes are returned per call: read larger files in pieces with offset and limit. " +
					"Content that is not UTF-8 text is returned base64-encoded with \"encoding\": \"base64\".",
				Parameters: `{"type":"object","properties":{` +
					`"path":{"type":"string","maxLength":` + strconv.Itoa(MaxPathBytes) + `,"description":"file path relative to the workspace"},` +
					`"offset":{"type":"integer","minimum":0,"description":"byte offset to start at (default 0)"},` +
					`"limit":{"type":"integer","minimum":0,"maximum":` + strconv.Itoa(MaxReadBytes) + `,"description":"bytes to read (default: to the end of the file)"}` +
					`},"required":["path"],"additionalProperties":false}`,
			},
			fields:  []string{"limit", "offset", "path"},
			maxArgs: MaxArgsBytes,
			bind:    bindRead,
		},
		{
			spec: Spec{
				Name: ToolWorkspaceWrite,
				Description: "Write a file of the task's workspace, atomically, creating parent directories. Returns {\"written\": bytes}. " +
					"At most " + strconv.Itoa(MaxWriteBytes) + " bytes per call and " + strconv.Itoa(MaxWorkspaceBytes) + " bytes in the whole workspace; " +
					"append adds to the end of the file instead of replacing it.",
				Parameters: `{"type":"object","properties":{` +
					`"path":{"type":"string","maxLength":` + strconv.Itoa(MaxPathBytes) + `,"description":"file path relative to the workspace"},` +
					`"content":{"type":"string","description":"text to write"},` +
					`"append":{"type":"boolean","description":"append instead of replacing (default false)"}` +
					`},"required":["path","content"],"additionalProperties":false}`,
			},
			fields:     []string{"append", "content", "path"},
			maxArgs:    MaxWriteArgsBytes,
			bind:       bindWrite,
			honoursKey: true,
		},
		{
			spec: Spec{
				Name: ToolWorkspaceList,
				Description: "List a directory of the task's workspace. Returns {\"entries\": [{\"name\", \"type\", \"size\"}], \"truncated\"}, " +
					"sorted by name; type is file, dir, symlink or other. At most " + strconv.Itoa(MaxListEntries) + " entries are returned.",
				Parameters: `{"type":"object","properties":{` +
					`"path":{"type":"string","maxLength":` + strconv.Itoa(MaxPathBytes) + `,"description":"directory relative to the workspace (default: the workspace itself)"}` +
					`},"additionalProperties":false}`,
			},
			fields:  []string{"path"},
			maxArgs: MaxArgsBytes,
			bind:    bindList,
		},
		{
			spec: Spec{
				Name: ToolShellRun,
				Description: "Run a command with /bin/sh -c in the task's workspace directory, with a minimal environment and no input. " +
					"Returns {\"exit_code\", \"output\", \"truncated\", \"output_bytes\"}: output is stdout and stderr combined, " +
					"at most " + strconv.Itoa(MaxShellOutputBytes) + " bytes (the end is kept). Processes the command leaves behind are killed when it exits. " +
					"It is confined to the workspace: it can read and write files there (not execute them: use sh script.sh) and read the system's programs, " +
					"nothing else (no /tmp: TMPDIR is the workspace; no /proc, so no /dev/stderr: use >&2).",
				Parameters: `{"type":"object","properties":{` +
					`"command":{"type":"string","maxLength":` + strconv.Itoa(MaxCommandBytes) + `,"description":"shell command"},` +
					`"timeout_seconds":{"type":"integer","minimum":1,"description":"stop the command after this many seconds (at most the tool's timeout)"}` +
					`},"required":["command"],"additionalProperties":false}`,
			},
			fields:  []string{"command", "timeout_seconds"},
			maxArgs: MaxArgsBytes,
			bind:    bindShell,
		},
		{
			spec: Spec{
				Name:        ToolTimeSleep,
				Description: "Wait for a number of seconds (at most the tool's timeout). Returns {\"slept\": seconds}.",
				Parameters: `{"type":"object","properties":{` +
					`"seconds":{"type":"number","minimum":0,"description":"seconds to wait"}` +
					`},"required":["seconds"],"additionalProperties":false}`,
			},
			fields:  []string{"seconds"},
			maxArgs: MaxArgsBytes,
			bind:    bindSleep,
		},
	}
}
