package host

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
)

// ModelSettings are the [model] values the runner itself needs: to bound a
// task's own model options and to tell executors how long a prompt may be.
type ModelSettings struct {
	MaxTokens     int // 0: not sent
	ContextTokens int // 0: unknown
}

// promptTokens is the most prompt tokens a request may hold: the context
// less the reply's share; 0 when the context is unknown.
func (m ModelSettings) promptTokens(maxTokens int) int64 {
	if m.ContextTokens <= 0 {
		return 0
	}
	return int64(max(m.ContextTokens-maxTokens, 0))
}

// maxTaskTools bounds a spec's tool list.
const maxTaskTools = 32

// taskOptions are what a task's spec asks of the host's services, besides
// its executor's own options:
//
//	{"goal": "...",
//	 "model": {"max_tokens": 512, "temperature": 0, "top_p": 0.9, "seed": 1, "stop": ["END"]},
//	 "tools": ["workspace.read", "workspace.write"]}
//
// "model" sets this task's request options (max_tokens at most the
// configured one); "tools" names the only tools its model calls are
// offered and its executor may call. Both are optional.
type taskOptions struct {
	Model model.Options
	// Tools is nil when the spec names none: every enabled tool.
	Tools []string
}

// parseTaskOptions reads the host's fields of a spec. Every error is a
// *plugin.FieldError naming the field.
func parseTaskOptions(spec []byte, ms ModelSettings) (taskOptions, error) {
	var top struct {
		Model json.RawMessage `json:"model"`
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(spec, &top); err != nil {
		return taskOptions{}, &plugin.FieldError{Field: "spec", Message: "must be a JSON object: " + err.Error()}
	}
	var opts taskOptions
	if isSet(top.Model) {
		var m struct {
			MaxTokens   *int     `json:"max_tokens"`
			Temperature *float64 `json:"temperature"`
			TopP        *float64 `json:"top_p"`
			Seed        *int     `json:"seed"`
			Stop        []string `json:"stop"`
		}
		dec := json.NewDecoder(bytes.NewReader(top.Model))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return taskOptions{}, &plugin.FieldError{Field: "spec.model", Message: "must be an object of max_tokens, temperature, top_p, seed and stop: " + err.Error()}
		}
		if ps := config.CheckSampling(m.Temperature, m.TopP, m.Seed, m.Stop); len(ps) > 0 {
			return taskOptions{}, &plugin.FieldError{Field: "spec.model." + ps[0].Key, Message: ps[0].Message}
		}
		if n := m.MaxTokens; n != nil {
			hi := ms.MaxTokens
			if hi == 0 {
				hi = config.MaxModelOutputTokens
			}
			if *n < config.MinModelOutputTokens || *n > hi {
				return taskOptions{}, &plugin.FieldError{Field: "spec.model.max_tokens", Message: fmt.Sprintf("is %d: must be %d..%d ([model] max_tokens)", *n, config.MinModelOutputTokens, hi)}
			}
			opts.Model.MaxTokens = *n
		}
		opts.Model.Temperature, opts.Model.TopP, opts.Model.Seed, opts.Model.Stop = m.Temperature, m.TopP, m.Seed, m.Stop
	}
	if isSet(top.Tools) {
		if err := json.Unmarshal(top.Tools, &opts.Tools); err != nil {
			return taskOptions{}, &plugin.FieldError{Field: "spec.tools", Message: "must be a list of tool names"}
		}
		if len(opts.Tools) > maxTaskTools {
			return taskOptions{}, &plugin.FieldError{Field: "spec.tools", Message: fmt.Sprintf("names %d tools, at most %d", len(opts.Tools), maxTaskTools)}
		}
		if opts.Tools == nil {
			opts.Tools = []string{} // [] offers none, unlike an absent list
		}
	}
	return opts, nil
}

func isSet(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// checkTaskTools refuses a spec's tool name the host does not have.
func checkTaskTools(names []string, known func(string) bool) error {
	for i, n := range names {
		if !known(n) {
			return &plugin.FieldError{Field: fmt.Sprintf("spec.tools[%d]", i), Message: fmt.Sprintf("%q is not an enabled tool of this host", truncateName(n))}
		}
	}
	return nil
}

func truncateName(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

// allows reports whether a task with these options may use the tool.
func (o taskOptions) allows(name string) bool {
	return o.Tools == nil || slices.Contains(o.Tools, name)
}

// taskOptions reads the run's task's options. The spec was checked when
// the task was created; a [model] max_tokens lowered since then lowers the
// task's too. A spec that no longer reads (it cannot, short of a store
// edit) offers no tools rather than all of them.
func (ru *run) taskOptions() taskOptions {
	opts, err := parseTaskOptions(ru.task.Spec, ModelSettings{})
	if err != nil {
		ru.r.log.Warn("task spec options not readable; no tools offered", "task", ru.id, "error", err)
		return taskOptions{Tools: []string{}}
	}
	if hi := ru.r.set.Model.MaxTokens; hi > 0 && opts.Model.MaxTokens > hi {
		opts.Model.MaxTokens = hi
	}
	return opts
}
