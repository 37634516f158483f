// Command flawed is the conformance kit's own test executor. By default it
// conforms: it counts steps in its checkpoint and completes after
// flawed.steps of them. Each flaw switched on in the spec breaks one rule
// that a check of the kit must catch, so that the kit's tests can show the
// check failing:
//
//	{"goal": "...", "flawed": {
//	  "steps": 3,          // complete after this many steps (default 3)
//	  "slow_step": 2,      // this step waits slow_ms first, honouring ctx
//	  "slow_ms": 3000,
//	  "result_bytes": 0,   // pad the result to this size
//	  "ignore_ctx": false, // flaw: the slow wait ignores ctx
//	  "forget": false,     // flaw: the position lives in memory, not in the checkpoint
//	  "need_file": "",     // step 1 reads this workspace file and fails without it
//	  "need_content": "",  // ... and fails unless it holds exactly this
//	  "effect_step": 0,    // this step appends a line to effects.log before its slow wait
//	  "vary_effect": false,// flaw: the line names the attempt, so a re-run's append is a new call that runs again
//	  "result_run": false, // flaw: the result names the run, so a resumed task's differs
//	  "ask": [],           // step 1 asks these input questions; the checkpoint keeps the answers, the result lists them
//	  "plan": ""           // step 1 sends this prompt to the model, runs the tools it asks for, and keeps its last reply in the result
//	}}
//
// Two variables set with -ldflags -X make an "older release" for the
// schema-upgrade check: schemaVersion "1" writes and accepts only the old
// schema flawed/1 ({"steps_done": n}); acceptOld "no" builds a current
// release that forgot how to read it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// Set by -ldflags "-X main.schemaVersion=1 -X main.acceptOld=no".
var (
	schemaVersion = "2"
	acceptOld     = "yes"
)

const (
	kind     = "flawed"
	schemaV1 = "flawed/1" // {"steps_done": n}
	schemaV2 = "flawed/2" // {"done": n}
)

type options struct {
	Steps       int      `json:"steps"`
	SlowStep    int      `json:"slow_step"`
	SlowMS      int      `json:"slow_ms"`
	ResultBytes int      `json:"result_bytes"`
	IgnoreCtx   bool     `json:"ignore_ctx"`
	Forget      bool     `json:"forget"`
	NeedFile    string   `json:"need_file"`
	NeedContent string   `json:"need_content"`
	EffectStep  int      `json:"effect_step"`
	VaryEffect  bool     `json:"vary_effect"`
	ResultRun   bool     `json:"result_run"`
	Ask         []string `json:"ask"`
	Plan        string   `json:"plan"`
}

type executor struct {
	// memory is where the "forget" flaw keeps its position: it does not
	// survive the process, which is the point.
	memory int
}

func main() { sdk.Serve(&executor{}) }

func (e *executor) Describe() sdk.Description {
	schemas := []string{schemaV2}
	switch {
	case schemaVersion == "1":
		schemas = []string{schemaV1}
	case acceptOld == "yes":
		schemas = append(schemas, schemaV1)
	}
	return sdk.Description{Kind: kind, Version: "0.0." + schemaVersion, CheckpointSchemas: schemas}
}

func (e *executor) Step(ctx context.Context, host sdk.Host, req sdk.StepRequest) (sdk.StepResult, error) {
	o, err := parseSpec(req.Spec)
	if err != nil {
		return sdk.Fail("executor_failed", "flawed: spec: "+err.Error()), nil
	}
	done, err := e.load(req.Checkpoint)
	if err != nil {
		return sdk.Fail("checkpoint_incompatible", "flawed: "+err.Error()), nil
	}
	if o.Forget {
		done = e.memory
	}
	n := done + 1
	if n == 1 && o.NeedFile != "" {
		if err := checkFile(ctx, host, o.NeedFile, o.NeedContent); err != nil {
			return sdk.Fail("executor_failed", "flawed: "+err.Error()), nil
		}
	}
	answers, plan := loadAnswers(req.Checkpoint)
	if n == 1 {
		if answers, err = ask(ctx, host, o.Ask); err != nil {
			return sdk.StepResult{}, err
		}
		if o.Plan != "" {
			if plan, err = modelTurn(ctx, host, o.Plan); err != nil {
				return sdk.StepResult{}, fmt.Errorf("flawed: plan: %w", err)
			}
		}
	}
	if n == o.EffectStep {
		if err := appendEffect(ctx, host, n, req.Attempt, o.VaryEffect); err != nil {
			return sdk.Fail("executor_failed", "flawed: "+err.Error()), nil
		}
	}
	if n == o.SlowStep {
		if err := wait(ctx, time.Duration(o.SlowMS)*time.Millisecond, o.IgnoreCtx); err != nil {
			return sdk.StepResult{}, fmt.Errorf("flawed: step %d: %w", n, err)
		}
	}
	e.memory = n
	cp, err := checkpoint(n, answers, plan)
	if err != nil {
		return sdk.StepResult{}, err
	}
	if n < o.Steps {
		return sdk.Continue(fmt.Sprintf("step %d", n), cp), nil
	}
	result, err := o.result(n, req.RunID, answers, plan)
	if err != nil {
		return sdk.StepResult{}, err
	}
	return sdk.Complete(fmt.Sprintf("done after %d steps", n), result, cp), nil
}

// result is the task's result: the steps taken, and what the options add.
func (o options) result(n int, runID int64, answers []json.RawMessage, plan string) ([]byte, error) {
	r := map[string]any{"steps": n}
	if plan != "" {
		r["plan"] = plan
	}
	if o.ResultRun {
		r["run"] = runID
	}
	if len(answers) > 0 {
		r["answers"] = answers
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if pad := o.ResultBytes - len(b); pad > 0 {
		r["pad"] = strings.Repeat("x", pad)
		return json.Marshal(r)
	}
	return b, nil
}

// ask asks each question with RequestInput and returns the answers.
func ask(ctx context.Context, host sdk.Host, questions []string) ([]json.RawMessage, error) {
	var answers []json.RawMessage
	for _, q := range questions {
		v, err := host.RequestInput(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("flawed: ask %q: %w", q, err)
		}
		answers = append(answers, v)
	}
	return answers, nil
}

// appendEffect appends a line to effects.log: an effect that is not
// idempotent, so a re-run that made it again would repeat it. The same
// call in every attempt of the step is replayed; the vary flaw makes each
// attempt's call another one.
func appendEffect(ctx context.Context, host sdk.Host, step int, attempt int64, vary bool) error {
	line := fmt.Sprintf("step %d\n", step)
	if vary {
		line = fmt.Sprintf("step %d, attempt %d\n", step, attempt)
	}
	args, err := json.Marshal(map[string]any{"path": "effects.log", "content": line, "append": true})
	if err != nil {
		return err
	}
	resp, err := host.CallTool(ctx, sdk.ToolRequest{Name: "workspace.write", Arguments: string(args)})
	if err != nil {
		return fmt.Errorf("append to effects.log: %w", err)
	}
	if resp.IsError {
		return fmt.Errorf("append to effects.log: %s", resp.Result)
	}
	return nil
}

func (e *executor) load(cp *sdk.Checkpoint) (int, error) {
	if cp == nil {
		return 0, nil
	}
	accepted := false
	for _, s := range e.Describe().CheckpointSchemas {
		accepted = accepted || s == cp.Schema
	}
	if !accepted {
		return 0, fmt.Errorf("checkpoint schema %q is not accepted", cp.Schema)
	}
	var p struct {
		Done      *int `json:"done"`
		StepsDone *int `json:"steps_done"`
	}
	if err := json.Unmarshal(cp.Payload, &p); err != nil {
		return 0, fmt.Errorf("checkpoint payload: %w", err)
	}
	switch {
	case cp.Schema == schemaV2 && p.Done != nil:
		return *p.Done, nil
	case cp.Schema == schemaV1 && p.StepsDone != nil:
		return *p.StepsDone, nil // the upgrade: v1's count is v2's
	}
	return 0, fmt.Errorf("checkpoint payload of schema %q lacks its count", cp.Schema)
}

// checkFile reads name from the task's workspace and compares it with want.
func checkFile(ctx context.Context, host sdk.Host, name, want string) error {
	args, err := json.Marshal(map[string]string{"path": name})
	if err != nil {
		return err
	}
	resp, err := host.CallTool(ctx, sdk.ToolRequest{Name: "workspace.read", Arguments: string(args)})
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if resp.IsError {
		return fmt.Errorf("read %s: %s", name, resp.Result)
	}
	var r struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal([]byte(resp.Result), &r); err != nil {
		return fmt.Errorf("read %s: result: %w", name, err)
	}
	if r.Content != want {
		return fmt.Errorf("%s holds %q, want %q", name, r.Content, want)
	}
	return nil
}

// loadAnswers reads the answers and the plan step 1 got from a checkpoint
// (of either schema); load has checked it.
func loadAnswers(cp *sdk.Checkpoint) ([]json.RawMessage, string) {
	if cp == nil {
		return nil, ""
	}
	var p struct {
		Answers []json.RawMessage `json:"answers"`
		Plan    string            `json:"plan"`
	}
	_ = json.Unmarshal(cp.Payload, &p)
	return p.Answers, p.Plan
}

func checkpoint(n int, answers []json.RawMessage, plan string) (*sdk.Checkpoint, error) {
	p, schema := map[string]any{"done": n}, schemaV2
	if schemaVersion == "1" {
		p, schema = map[string]any{"steps_done": n}, schemaV1
	}
	if len(answers) > 0 {
		p["answers"] = answers
	}
	if plan != "" {
		p["plan"] = plan
	}
	b, err := json.Marshal(p)
	return &sdk.Checkpoint{Schema: schema, Payload: b}, err
}

func wait(ctx context.Context, d time.Duration, ignoreCtx bool) error {
	if ignoreCtx {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func parseSpec(raw []byte) (options, error) {
	var s struct {
		Goal   string  `json:"goal"`
		Flawed options `json:"flawed"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return options{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return options{}, errors.New("trailing data after the spec")
	}
	if s.Flawed.Steps <= 0 {
		s.Flawed.Steps = 3
	}
	return s.Flawed, nil
}

// maxModelRounds bounds the model's tool rounds in one step.
const maxModelRounds = 4

// modelTurn is docs/executor-sdk.md's model call with tool calls: it asks
// the model, runs each tool call of the reply through the host, hands the
// results back as tool messages, and returns the model's last text.
func modelTurn(ctx context.Context, host sdk.Host, prompt string) (string, error) {
	tools, err := host.Tools(ctx) // the host's tools, as the model should see them
	if err != nil {
		return "", fmt.Errorf("list tools: %w", err)
	}
	msgs := []sdk.Message{
		{Role: "system", Content: "You plan the work of one step. Use the tools, then answer in one line."},
		{Role: "user", Content: prompt},
	}
	for round := 1; round <= maxModelRounds; round++ {
		resp, err := host.CallModel(ctx, sdk.ModelRequest{Messages: msgs, Tools: tools})
		if err != nil {
			return "", fmt.Errorf("model call %d: %w", round, err)
		}
		msgs = append(msgs, resp.Message) // the assistant's turn, its tool calls included
		if len(resp.Message.ToolCalls) == 0 {
			return resp.Message.Content, nil
		}
		for _, call := range resp.Message.ToolCalls {
			res, err := host.CallTool(ctx, sdk.ToolRequest{Name: call.Name, Arguments: call.Arguments})
			if err != nil {
				return "", fmt.Errorf("tool %s: %w", call.Name, err)
			}
			// A tool that ran and failed (res.IsError) is the model's to
			// handle: it reads the error in the result.
			msgs = append(msgs, sdk.Message{Role: "tool", ToolCallID: call.ID, Content: res.Result})
		}
	}
	return "", fmt.Errorf("no answer after %d model rounds", maxModelRounds)
}
