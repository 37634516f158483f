package tools

import (
	"encoding/json"
	"errors"
	"strings"
)

// The task tools (docs/tools.md): an agent inside a task creates and
// steers tasks of its own subtree. Their specs and policies live here, with
// the other tools', so that they are offered, configured
// ([tools."task.create"] approval) and ledgered like any tool; their calls
// are served by the host, which owns the tasks (Registry.Call refuses them).
const (
	ToolTaskDelegate = "task.delegate"
	ToolTaskCreate   = "task.create"
	ToolTaskList     = "task.list"
	ToolTaskStatus   = "task.status"
	ToolTaskCancel   = "task.cancel"
	ToolTaskPause    = "task.pause"
	ToolTaskResume   = "task.resume"
)

// MaxTaskToolArgsBytes bounds a task tool's arguments: a goal of 2000
// characters in UTF-8 and its executor options.
const MaxTaskToolArgsBytes = 16 << 10

// ErrHostTool: a task tool reached the registry; the host serves them.
var ErrHostTool = errors.New("tools: a task tool is served by the host")

// IsTaskTool reports whether name is one of the task tools.
func IsTaskTool(name string) bool { return strings.HasPrefix(name, "task.") }

// TaskToolFields returns the arguments a task tool accepts, sorted.
func TaskToolFields(name string) []string {
	for _, b := range taskBuiltins() {
		if b.spec.Name == name {
			return b.fields
		}
	}
	return nil
}

// ParseTaskToolArgs checks a task tool's arguments as Call checks a
// built-in's: one JSON object of accepted keys, within the bound.
func ParseTaskToolArgs(name string, args json.RawMessage) (map[string]json.RawMessage, error) {
	if len(args) > MaxTaskToolArgsBytes {
		return nil, &ArgError{Tool: name, Message: "are too large"}
	}
	return parseArgs(name, args, TaskToolFields(name))
}

const childArgs = `"goal":{"type":"string","maxLength":2000,"description":"what the child task is to do"},` +
	`"executor":{"type":"string","description":"the child's executor kind (default: this task's)"},` +
	`"options":{"type":"object","description":"the child's executor options, as in a task spec"},` +
	`"max_steps":{"type":"integer","minimum":1,"description":"the child's step budget (default: half of what this task has left, at most the host's default)"},` +
	`"max_tool_calls":{"type":"integer","minimum":0},"max_model_calls":{"type":"integer","minimum":0},` +
	`"max_depth":{"type":"integer","minimum":0},"max_wall_seconds":{"type":"integer","minimum":1},` +
	`"max_model_tokens":{"type":"integer","minimum":0},"max_output_bytes":{"type":"integer","minimum":0}`

var childFields = []string{"executor", "goal", "max_depth", "max_model_calls", "max_model_tokens", "max_output_bytes", "max_steps", "max_tool_calls", "max_wall_seconds", "options"}

const idArg = `{"type":"object","properties":{"task_id":{"type":"string","maxLength":128,"description":"a task of this task's subtree"}},"required":["task_id"],"additionalProperties":false}`

func hostServed(*call) (action, error) { return nil, ErrHostTool }

func taskBuiltins() []builtin {
	one := func(name, desc, params string, fields []string) builtin {
		return builtin{spec: Spec{Name: name, Description: desc, Parameters: params}, fields: fields, maxArgs: MaxTaskToolArgsBytes, bind: hostServed}
	}
	return []builtin{
		one(ToolTaskDelegate, "Delegate a child task: it runs on its own, with budgets taken from this task's. When this step ends while a child has not ended, "+
			"this task waits (blocked) and its next step sees every child's status and result. Returns {\"task_id\", \"status\"}.",
			`{"type":"object","properties":{`+childArgs+`},"required":["goal"],"additionalProperties":false}`, childFields),
		one(ToolTaskCreate, "Create a task: the same as task.delegate (a task created from inside a task is always its child).",
			`{"type":"object","properties":{`+childArgs+`},"required":["goal"],"additionalProperties":false}`, childFields),
		one(ToolTaskList, "List the tasks of this task's subtree. Returns {\"tasks\": [{\"task_id\", \"parent_task_id\", \"status\", \"reason\", \"depth\"}]}.",
			`{"type":"object","properties":{"status":{"type":"string","description":"only tasks of this status"}},"additionalProperties":false}`, []string{"status"}),
		one(ToolTaskStatus, "The status of a task of this task's subtree. Returns {\"task_id\", \"status\", \"reason\", \"message\", \"steps\", \"result\", \"children\"}.", idArg, []string{"task_id"}),
		one(ToolTaskCancel, "Cancel a task of this task's subtree, and its own subtree. Returns {\"task_id\", \"status\"}.", idArg, []string{"task_id"}),
		one(ToolTaskPause, "Pause a task of this task's subtree, and its own subtree (interrupted, user_pause). Returns {\"task_id\", \"status\"}.", idArg, []string{"task_id"}),
		one(ToolTaskResume, "Resume an interrupted task of this task's subtree, and its interrupted descendants. Returns {\"task_id\", \"status\"}.", idArg, []string{"task_id"}),
	}
}
