package legacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

const testTask = "task-7f3a"

// goalSpec is a spec with goal and, if given, a raw "legacy" object.
func goalSpec(goal, legacy string) []byte {
	spec := map[string]json.RawMessage{}
	g, _ := json.Marshal(goal)
	spec["goal"] = g
	if legacy != "" {
		spec["legacy"] = json.RawMessage(legacy)
	}
	out, _ := json.Marshal(spec)
	return out
}

// firstStep is the request of a task's first step, as the host sends it:
// the step is already charged, so one of 20 steps is used.
func firstStep(goal string) sdk.StepRequest {
	return sdk.StepRequest{
		TaskID: testTask, RunID: 1, Attempt: 1, Spec: goalSpec(goal, ""),
		Limits:    sdk.Budgets{Steps: 20, ToolCalls: 50, ModelCalls: 100},
		Remaining: sdk.Budgets{Steps: 19, ToolCalls: 50, ModelCalls: 100},
	}
}

// nextStep is the request of the step after prev, which ended with res.
func nextStep(prev sdk.StepRequest, res sdk.StepResult) sdk.StepRequest {
	next := prev
	next.Attempt++
	next.Remaining.Steps--
	next.Checkpoint = res.Checkpoint
	next.Recent = append(slices.Clone(prev.Recent), sdk.Summary{Step: prev.Attempt, Text: res.Summary})
	next.Indeterminate = nil
	return next
}

func mustStep(t *testing.T, host sdk.Host, req sdk.StepRequest) sdk.StepResult {
	t.Helper()
	res, err := New(nil).Step(context.Background(), host, req)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return res
}

func wantOutcome(t *testing.T, res sdk.StepResult, outcome sdk.Outcome, reason string) {
	t.Helper()
	if res.Outcome != outcome || res.Reason != reason {
		t.Fatalf("result = %v %q (%q), want %v %q", res.Outcome, res.Reason, res.Message, outcome, reason)
	}
}

func TestDescribe(t *testing.T) {
	d := New(nil).Describe()
	if d.Kind != "legacy" || d.Version != "1.1.0" || !reflect.DeepEqual(d.CheckpointSchemas, []string{"legacy/1"}) {
		t.Fatalf("Describe = %+v", d)
	}
}

func TestOneStepTaskCompletes(t *testing.T) {
	host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text("TASK_COMPLETE: report ready"))})
	res := mustStep(t, host, firstStep("write the report"))
	wantOutcome(t, res, sdk.OutcomeComplete, "")
	if res.Summary != "report ready" {
		t.Errorf("summary = %q, want %q", res.Summary, "report ready")
	}
	var result struct{ Summary string }
	if err := json.Unmarshal(res.Result, &result); err != nil || result.Summary != "report ready" {
		t.Errorf("result = %s (%v), want {\"summary\":\"report ready\"}", res.Result, err)
	}
	if res.Checkpoint == nil || res.Checkpoint.Schema != CheckpointSchema {
		t.Errorf("checkpoint = %+v, want schema %s", res.Checkpoint, CheckpointSchema)
	}
	if calls, _, _, _ := snapshot(host); !reflect.DeepEqual(calls, []string{"Tools", "CallModel"}) {
		t.Errorf("host calls = %v, want [Tools CallModel]", calls)
	}
}

func TestSummariesTravelInTheSystemMessage(t *testing.T) {
	host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text("drafted the outline"), text("TASK_COMPLETE: report ready"))})
	req1 := firstStep("write the report")
	res1 := mustStep(t, host, req1)
	wantOutcome(t, res1, sdk.OutcomeContinue, "")
	if res1.Summary != "drafted the outline" {
		t.Fatalf("step 1 summary = %q", res1.Summary)
	}
	res2 := mustStep(t, host, nextStep(req1, res1))
	wantOutcome(t, res2, sdk.OutcomeComplete, "")

	_, models, _, _ := snapshot(host)
	if len(models) != 2 {
		t.Fatalf("%d model calls, want 2", len(models))
	}
	sys1, sys2 := models[0].Messages[0], models[1].Messages[0]
	if sys1.Role != "system" || sys2.Role != "system" {
		t.Fatalf("first messages have roles %q and %q, want system", sys1.Role, sys2.Role)
	}
	if !strings.Contains(sys1.Content, "(no completed steps yet)") || strings.Contains(sys1.Content, "- step ") {
		t.Errorf("step 1 system message = %q, want (no completed steps yet) and no step lines", sys1.Content)
	}
	if !strings.HasSuffix(sys2.Content, "\n- step 1: drafted the outline") || strings.Contains(sys2.Content, "no completed steps") {
		t.Errorf("step 2 system message = %q, want the line for step 1", sys2.Content)
	}
}

func TestContextKeepsTheLastFiveSummaries(t *testing.T) {
	// Host summaries are numbered by attempt: 9 attempts made these 7
	// steps, and the context numbers them 1..7 all the same.
	var recent []sdk.Summary
	for i := 1; i <= 7; i++ {
		recent = append(recent, sdk.Summary{Step: int64(i + 2), Text: fmt.Sprintf("did part %d", i)})
	}
	recent[4].Text = ""
	recent[6].Text = "two\nlines"
	got := taskContext("t1", "the goal", recent, 7)
	want := "Long-horizon task t1\nGoal: the goal\n\nProgress from earlier steps:\n" +
		"- step 3: did part 3\n- step 4: did part 4\n- step 5: (no summary)\n- step 6: did part 6\n- step 7: two\nlines"
	if got != want {
		t.Errorf("context\n got %q\nwant %q", got, want)
	}
}

func TestContextBound(t *testing.T) {
	header := "Long-horizon task t1\nGoal: g\n\nProgress from earlier steps:\n- step 1: "
	fill := maxContextRunes - len(header)
	tests := []struct {
		name    string
		summary string
		want    string
	}{
		{"at the limit", strings.Repeat("x", fill), header + strings.Repeat("x", fill)},
		{"one past it", strings.Repeat("x", fill+1), header + strings.Repeat("x", fill)},
		{"multi-byte characters count once", strings.Repeat("é", fill+1), header + strings.Repeat("é", fill)},
		{"far past it", strings.Repeat("y", 5000), header + strings.Repeat("y", fill)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := taskContext("t1", "g", []sdk.Summary{{Step: 1, Text: tc.summary}}, 1)
			if got != tc.want {
				t.Errorf("context has %d characters, want %d", utf8.RuneCountInString(got), utf8.RuneCountInString(tc.want))
			}
		})
	}
}

func TestGoalIsInTheSystemMessageNotThePrompt(t *testing.T) {
	const goal = "compile the quarterly numbers for the zebra project"
	host := legacyHost(&sdktest.Host{})
	mustStep(t, host, firstStep(goal))
	_, models, _, _ := snapshot(host)
	msgs := models[0].Messages
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("messages = %+v, want [system user]", msgs)
	}
	if !strings.Contains(msgs[0].Content, goal) {
		t.Errorf("system message %q does not carry the goal", msgs[0].Content)
	}
	if strings.Contains(msgs[1].Content, "zebra") {
		t.Errorf("user prompt %q carries the goal", msgs[1].Content)
	}
}

func TestPromptCarriesStepCounterAndSentinel(t *testing.T) {
	cp := func(done int) *sdk.Checkpoint {
		c, err := state{LastSummaries: []string{"x"}, StepsDone: done}.checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name  string
		setup func(*sdk.StepRequest)
		want  string // step n/max
	}{
		{"first step", func(*sdk.StepRequest) {}, "step 1/20"},
		{"third step", func(r *sdk.StepRequest) {
			r.Attempt, r.Remaining.Steps, r.Checkpoint = 3, 17, cp(2)
			r.Recent = []sdk.Summary{{Step: 1, Text: "a"}, {Step: 2, Text: "b"}}
		}, "step 3/20"},
		{"other limit", func(r *sdk.StepRequest) { r.Limits.Steps, r.Remaining.Steps = 5, 4 }, "step 1/5"},
		{"re-run of step 3 after a crashed attempt", func(r *sdk.StepRequest) {
			r.Attempt, r.Remaining.Steps, r.Checkpoint = 4, 16, cp(2)
			r.Recent = []sdk.Summary{{Step: 1, Text: "a"}, {Step: 2, Text: "b"}}
		}, "step 3/20"},
		{"after a crash, the host numbers the next summary by attempt", func(r *sdk.StepRequest) {
			r.Attempt, r.Remaining.Steps, r.Checkpoint = 5, 15, cp(3)
			r.Recent = []sdk.Summary{{Step: 1, Text: "a"}, {Step: 2, Text: "b"}, {Step: 4, Text: "c"}}
		}, "step 4/20"},
		{"no checkpoint: the host's summaries count", func(r *sdk.StepRequest) {
			r.Attempt, r.Remaining.Steps = 3, 17
			r.Recent = []sdk.Summary{{Step: 1, Text: "a"}, {Step: 2, Text: "b"}}
		}, "step 3/20"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := firstStep("goal")
			tc.setup(&req)
			host := legacyHost(&sdktest.Host{})
			mustStep(t, host, req)
			_, models, _, _ := snapshot(host)
			got := models[0].Messages[1].Content
			want := "[long-horizon task " + testTask + " " + tc.want + "] Work toward the goal described in your task context. " +
				"Use tools only when the goal requires them. When the goal is fully achieved, reply with a final answer " +
				"starting with TASK_COMPLETE: followed by a short result summary. Otherwise report concrete progress made in this step."
			if got != want {
				t.Errorf("prompt = %q\nwant     %q", got, want)
			}
		})
	}
}

func TestStepNumberMatchesTheHostCountWithoutCrashes(t *testing.T) {
	host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text("a"), text("b"), text("c"), text("d"))})
	req := firstStep("goal")
	for i := 0; i < 4; i++ {
		res := mustStep(t, host, req)
		_, models, _, _ := snapshot(host)
		want := fmt.Sprintf(" step %d/%d]", req.Limits.Steps-req.Remaining.Steps, req.Limits.Steps)
		if got := models[i].Messages[1].Content; !strings.Contains(got, want) {
			t.Fatalf("step %d prompt = %q, want %q (limit - remaining)", i+1, got, want)
		}
		req = nextStep(req, res)
	}
}

func TestRerunOfAStepSendsTheSameModelRequests(t *testing.T) {
	// An attempt that crashed after its model and tool calls were observed
	// is re-run: the host replays observed effects by (seq, fingerprint),
	// which works only if the re-run asks the same.
	script := func() *sdktest.Host {
		return legacyHost(&sdktest.Host{
			ToolsF:     sdktest.ListTools(sdk.ToolSpec{Name: "workspace.write"}),
			CallModelF: sdktest.Replies(callTools(sdk.ToolCall{ID: "call_1", Name: "workspace.write", Arguments: `{"path":"a"}`}), text("wrote a")),
		})
	}
	crashed := firstStep("goal")
	crashed.Attempt, crashed.Remaining.Steps = 3, 17
	crashed.Recent = []sdk.Summary{{Step: 1, Text: "a"}, {Step: 2, Text: "b"}}
	crashed.Checkpoint, _ = state{LastSummaries: []string{"a", "b"}, StepsDone: 2}.checkpoint()
	rerun := crashed
	rerun.Attempt, rerun.Remaining.Steps = 4, 16

	h1, h2 := script(), script()
	mustStep(t, h1, crashed)
	mustStep(t, h2, rerun)
	_, m1, _, _ := snapshot(h1)
	_, m2, _, _ := snapshot(h2)
	if !reflect.DeepEqual(m1, m2) {
		t.Fatalf("the re-run's model requests differ:\n%+v\n%+v", m1, m2)
	}
}

func TestEachStepStartsWithAFreshHistory(t *testing.T) {
	host := legacyHost(&sdktest.Host{
		ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "workspace.write"}),
		CallModelF: sdktest.Replies(
			callTools(sdk.ToolCall{ID: "call_1", Name: "workspace.write", Arguments: `{}`}), text("wrote notes"),
			text("TASK_COMPLETE: done"),
		),
	})
	req := firstStep("goal")
	res := mustStep(t, host, req)
	mustStep(t, host, nextStep(req, res))
	_, models, _, _ := snapshot(host)
	if len(models) != 3 {
		t.Fatalf("%d model calls, want 3", len(models))
	}
	if got := models[2].Messages; len(got) != 2 || got[0].Role != "system" || got[1].Role != "user" {
		t.Fatalf("step 2 starts with %+v, want only [system user]", got)
	}
}

func TestCompletionSentinel(t *testing.T) {
	tests := []struct {
		reply    string
		complete bool
		summary  string
	}{
		{"TASK_COMPLETE: report ready", true, "report ready"},
		{"TASK_COMPLETE", true, "completed"},
		{"task_complete: lower case", true, "lower case"},
		{"Task_Complete:no space", true, "no space"},
		{"  \nTASK_COMPLETE:  padded  \n", true, "padded"},
		{"TASK_COMPLETE: first line\nsecond line", true, "first line\nsecond line"},
		// Zara's test is a prefix of the upper-cased reply, so these
		// complete too; the summary drops 13 characters, then colons.
		{"TASK_COMPLETELY_BROKEN", true, "LY_BROKEN"},
		{"TASK_COMPLETE_NOT: yet", true, "_NOT: yet"},
		{"TASK_COMPLETE - dash", true, "- dash"},
		{"TASK_COMPLETE : spaced colon", true, ": spaced colon"},
		{"TASK_COMPLETE:\u3000:x", true, ":x"},
		{"TASK_COMPLETE:::", true, "completed"},
		{"ta\u017fk_complete: long s", true, "long s"},
		{"\x1cTASK_COMPLETE\x1f", true, "completed"},
		{"Done. TASK_COMPLETE: later", false, "Done. TASK_COMPLETE: later"},
		{"first line\nTASK_COMPLETE: later", false, "first line\nTASK_COMPLETE: later"},
		{"TAS\u212a_COMPLETE: kelvin sign", false, "TAS\u212a_COMPLETE: kelvin sign"},
		{"TA\u00dfK_COMPLETE", false, "TA\u00dfK_COMPLETE"},
		{"\u0131TASK_COMPLETE", false, "\u0131TASK_COMPLETE"},
		{"\u200bTASK_COMPLETE", false, "\u200bTASK_COMPLETE"},
		{"\ufeffTASK_COMPLETE: bom", false, "\ufeffTASK_COMPLETE: bom"},
		{"TASK_COMPLET", false, "TASK_COMPLET"},
		{"made progress", false, "made progress"},
	}
	for _, tc := range tests {
		t.Run(tc.reply, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text(tc.reply))})
			res := mustStep(t, host, firstStep("goal"))
			want := sdk.OutcomeContinue
			if tc.complete {
				want = sdk.OutcomeComplete
			}
			wantOutcome(t, res, want, "")
			if res.Summary != tc.summary {
				t.Errorf("summary = %q, want %q", res.Summary, tc.summary)
			}
		})
	}
}

func TestEmptySummaryBecomesCompleted(t *testing.T) {
	tests := []struct {
		name, reply string
		outcome     sdk.Outcome
	}{
		{"bare sentinel", "TASK_COMPLETE", sdk.OutcomeComplete},
		{"sentinel and colon", "TASK_COMPLETE:", sdk.OutcomeComplete},
		{"sentinel and blanks", "TASK_COMPLETE:  \n\t", sdk.OutcomeComplete},
		{"empty reply", "", sdk.OutcomeContinue},
		{"blank reply", " \n ", sdk.OutcomeContinue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustStep(t, legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text(tc.reply))}), firstStep("goal"))
			wantOutcome(t, res, tc.outcome, "")
			if res.Summary != "completed" {
				t.Errorf("summary = %q, want %q", res.Summary, "completed")
			}
		})
	}
}

func TestSummaryLengthBound(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		want  string
	}{
		{"900 characters kept", strings.Repeat("a", 900), strings.Repeat("a", 900)},
		{"2000 characters kept", strings.Repeat("b", 2000), strings.Repeat("b", 2000)},
		{"2001 characters cut to 2000", strings.Repeat("c", 2001), strings.Repeat("c", 2000)},
		{"2500 characters cut to 2000", strings.Repeat("c", 2500), strings.Repeat("c", 2000)},
		{"2500 multi-byte characters cut to 2000 characters", strings.Repeat("é", 2500), strings.Repeat("é", 2000)},
		{"the sentinel is not counted", "TASK_COMPLETE: " + strings.Repeat("d", 2000), strings.Repeat("d", 2000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustStep(t, legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text(tc.reply))}), firstStep("goal"))
			if res.Summary != tc.want {
				t.Errorf("summary has %d characters, want %d", utf8.RuneCountInString(res.Summary), utf8.RuneCountInString(tc.want))
			}
			if !utf8.ValidString(res.Summary) {
				t.Errorf("summary is not valid UTF-8")
			}
		})
	}
}

func TestIdenticalSummariesFailNoProgressOnlyWhenAskedTo(t *testing.T) {
	tests := []struct {
		name    string
		legacy  string // the spec's "legacy" object
		replies []string
		want    []sdk.Outcome // one per step
	}{
		{"two identical do not", `{"stop_after_identical_summaries":3}`, []string{"stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue}},
		{"three identical do", `{"stop_after_identical_summaries":3}`, []string{"stuck", "stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeFail}},
		{"after other work", `{"stop_after_identical_summaries":3}`, []string{"a", "stuck", "stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeFail}},
		{"a different summary breaks the run", `{"stop_after_identical_summaries":3}`, []string{"stuck", "stuck", "moved", "stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue}},
		{"empty replies count as identical", `{"stop_after_identical_summaries":3}`, []string{"", " ", ""}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeFail}},
		{"a completion is progress", `{"stop_after_identical_summaries":3}`, []string{"same", "same", "TASK_COMPLETE: same"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeComplete}},
		{"off by default: Zara has no such rule", "", []string{"stuck", "stuck", "stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue}},
		{"a run of 2", `{"stop_after_identical_summaries":2}`, []string{"a", "stuck", "stuck"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeFail}},
		{"a run of 5", `{"stop_after_identical_summaries":5}`, []string{"s", "s", "s", "s", "s"}, []sdk.Outcome{sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeContinue, sdk.OutcomeFail}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs := make([]sdk.Message, len(tc.replies))
			for i, r := range tc.replies {
				msgs[i] = text(r)
			}
			host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(msgs...)})
			req := firstStep("goal")
			req.Spec = goalSpec("goal", tc.legacy)
			for i, want := range tc.want {
				res := mustStep(t, host, req)
				if res.Outcome != want {
					t.Fatalf("step %d = %v %q %q, want %v", i+1, res.Outcome, res.Reason, res.Message, want)
				}
				if want == sdk.OutcomeFail && res.Reason != "no_progress" {
					t.Fatalf("step %d reason = %q, want no_progress", i+1, res.Reason)
				}
				req = nextStep(req, res)
			}
		})
	}
}

func TestToolCallRoundTrip(t *testing.T) {
	offered := []sdk.ToolSpec{{Name: "workspace.write", Description: "write a file", Parameters: `{"type":"object"}`}}
	host := legacyHost(&sdktest.Host{
		ToolsF: sdktest.ListTools(offered...),
		CallModelF: sdktest.Replies(
			sdk.Message{Role: "assistant", Content: "writing", ToolCalls: []sdk.ToolCall{{ID: "call_1", Name: "workspace.write", Arguments: `{"path":"notes.md"}`}}},
			text("TASK_COMPLETE: wrote notes"),
		),
		CallToolF: func(_ context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
			return sdk.ToolResponse{Result: `{"written":"notes.md"}`}, nil
		},
	})
	res := mustStep(t, host, firstStep("goal"))
	wantOutcome(t, res, sdk.OutcomeComplete, "")
	if res.Summary != "wrote notes" {
		t.Errorf("summary = %q", res.Summary)
	}
	calls, models, tools, _ := snapshot(host)
	if want := []string{"Tools", "CallModel", "CallTool", "CallModel"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("host calls = %v, want %v", calls, want)
	}
	for i, m := range models {
		if !reflect.DeepEqual(m.Tools, offered) {
			t.Errorf("model call %d offered tools %+v, want %+v", i, m.Tools, offered)
		}
	}
	if tools[0].Name != "workspace.write" || tools[0].Arguments != `{"path":"notes.md"}` {
		t.Errorf("tool request = %+v", tools[0])
	}
	second := models[1].Messages
	if len(second) != 4 {
		t.Fatalf("second model call has %d messages, want 4: %+v", len(second), second)
	}
	asst, tool := second[2], second[3]
	if asst.Role != "assistant" || asst.Content != "writing" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_1" {
		t.Errorf("assistant message = %+v", asst)
	}
	if tool.Role != "tool" || tool.ToolCallID != "call_1" || tool.Content != `{"written":"notes.md"}` {
		t.Errorf("tool message = %+v", tool)
	}
}

func TestToolCallsTheModelGetsWrongGoBackToIt(t *testing.T) {
	tests := []struct {
		name      string
		call      sdk.ToolCall
		tool      func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error)
		wantHost  bool // the call reaches the host
		wantInMsg string
	}{
		{"tool result marked as an error", sdk.ToolCall{ID: "c1", Name: "shell.run", Arguments: `{"command":"false"}`},
			func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
				return sdk.ToolResponse{Result: `{"exit":1}`, IsError: true}, nil
			}, true, `error: {"exit":1}`},
		{"tool not offered", sdk.ToolCall{ID: "c1", Name: "rm.everything", Arguments: `{}`}, nil, false, `there is no tool "rm.everything"`},
		{"arguments not JSON", sdk.ToolCall{ID: "c1", Name: "shell.run", Arguments: `{"command":`}, nil, false, "not valid JSON"},
		{"oversized result cut", sdk.ToolCall{ID: "c1", Name: "shell.run"},
			func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
				return sdk.ToolResponse{Result: strings.Repeat("x", maxToolResultBytes+100)}, nil
			}, true, "[output truncated]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{
				ToolsF:     sdktest.ListTools(sdk.ToolSpec{Name: "shell.run"}),
				CallModelF: sdktest.Replies(callTools(tc.call), text("saw the error")),
				CallToolF:  tc.tool,
			})
			res := mustStep(t, host, firstStep("goal"))
			wantOutcome(t, res, sdk.OutcomeContinue, "")
			_, models, tools, _ := snapshot(host)
			if (len(tools) == 1) != tc.wantHost {
				t.Errorf("%d tool calls reached the host, want host=%v", len(tools), tc.wantHost)
			}
			if len(models) != 2 {
				t.Fatalf("%d model calls, want 2", len(models))
			}
			msg := models[1].Messages[3]
			if msg.Role != "tool" || msg.ToolCallID != "c1" || !strings.Contains(msg.Content, tc.wantInMsg) {
				t.Errorf("tool message = %.200q, want one containing %q", msg.Content, tc.wantInMsg)
			}
			if len(msg.Content) > maxToolResultBytes+100 {
				t.Errorf("tool message is %d bytes", len(msg.Content))
			}
		})
	}
}

func TestIdempotencyKeysComeFromTaskAttemptAndIndex(t *testing.T) {
	// Models reuse call IDs ("call_1" in every turn): keys must not.
	host := legacyHost(&sdktest.Host{
		ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "t"}),
		CallModelF: sdktest.Replies(
			callTools(sdk.ToolCall{ID: "call_1", Name: "t"}, sdk.ToolCall{ID: "call_1", Name: "t"}),
			callTools(sdk.ToolCall{ID: "call_1", Name: "t"}),
			text("step one"),
			callTools(sdk.ToolCall{ID: "call_1", Name: "t"}),
			text("step two"),
		),
	})
	req := firstStep("goal")
	res := mustStep(t, host, req)
	mustStep(t, host, nextStep(req, res))
	_, _, tools, _ := snapshot(host)
	var keys []string
	for _, r := range tools {
		keys = append(keys, r.IdempotencyKey)
	}
	want := []string{"legacy/" + testTask + "/1/1", "legacy/" + testTask + "/1/2", "legacy/" + testTask + "/1/3", "legacy/" + testTask + "/2/1"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
}

func TestToolCallsWithoutIDsGetOne(t *testing.T) {
	host := legacyHost(&sdktest.Host{
		ToolsF:     sdktest.ListTools(sdk.ToolSpec{Name: "t"}),
		CallModelF: sdktest.Replies(callTools(sdk.ToolCall{Name: "t"}, sdk.ToolCall{Name: "t"}), text("ok")),
	})
	mustStep(t, host, firstStep("goal"))
	_, models, _, _ := snapshot(host)
	msgs := models[1].Messages
	ids := []string{msgs[2].ToolCalls[0].ID, msgs[2].ToolCalls[1].ID}
	if ids[0] == "" || ids[0] == ids[1] || msgs[3].ToolCallID != ids[0] || msgs[4].ToolCallID != ids[1] {
		t.Fatalf("call IDs %q, tool messages for %q and %q", ids, msgs[3].ToolCallID, msgs[4].ToolCallID)
	}
}

func TestRoundsBound(t *testing.T) {
	call := callTools(sdk.ToolCall{ID: "c", Name: "t", Arguments: `{}`})
	repeat := func(n int, last sdk.Message) []sdk.Message {
		out := slices.Repeat([]sdk.Message{call}, n)
		return append(out, last)
	}
	tests := []struct {
		name       string
		legacy     string
		script     []sdk.Message
		outcome    sdk.Outcome
		modelCalls int
		toolCalls  int
	}{
		{"default, final reply at round 8", "", repeat(7, text("done")), sdk.OutcomeContinue, 8, 7},
		{"default, tools asked at round 8", "", repeat(7, call), sdk.OutcomeFail, 8, 7},
		{"max_rounds 1, final reply", `{"max_rounds":1}`, repeat(0, text("done")), sdk.OutcomeContinue, 1, 0},
		{"max_rounds 1, tools asked", `{"max_rounds":1}`, repeat(0, call), sdk.OutcomeFail, 1, 0},
		{"max_rounds 3, final reply at round 3", `{"max_rounds":3}`, repeat(2, text("done")), sdk.OutcomeContinue, 3, 2},
		{"max_rounds 3, tools asked at round 3", `{"max_rounds":3}`, repeat(2, call), sdk.OutcomeFail, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "t"}), CallModelF: sdktest.Replies(tc.script...)})
			req := firstStep("goal")
			req.Spec = goalSpec("goal", tc.legacy)
			res := mustStep(t, host, req)
			if res.Outcome != tc.outcome {
				t.Fatalf("outcome = %v (%q), want %v", res.Outcome, res.Message, tc.outcome)
			}
			if tc.outcome == sdk.OutcomeFail && (res.Reason != "executor_failed" || !strings.Contains(res.Message, "rounds")) {
				t.Errorf("fail = %q %q, want executor_failed naming the rounds", res.Reason, res.Message)
			}
			_, models, tools, _ := snapshot(host)
			if len(models) != tc.modelCalls || len(tools) != tc.toolCalls {
				t.Errorf("%d model and %d tool calls, want %d and %d", len(models), len(tools), tc.modelCalls, tc.toolCalls)
			}
		})
	}
}

func TestIndeterminateToolEffectAsksApprovalFirst(t *testing.T) {
	rejected := errors.New("approval rejected: the task failed")
	toolEffect := sdk.Effect{Attempt: 1, Seq: 2, Kind: "tool", Status: "indeterminate", Summary: `shell.run{command:"make deploy"}`}
	modelEffect := sdk.Effect{Attempt: 1, Seq: 1, Kind: "model", Status: "indeterminate", Summary: "model{messages:2,tools:1,depth:0}"}
	tests := []struct {
		name          string
		effects       []sdk.Effect
		approve       func(context.Context, string) (sdk.Decision, error)
		wantApproval  bool
		wantErr       error
		wantOutcome   sdk.Outcome
		wantReason    string
		wantModelCall bool
	}{
		{name: "approved", effects: []sdk.Effect{modelEffect, toolEffect}, wantApproval: true,
			wantOutcome: sdk.OutcomeComplete, wantModelCall: true},
		{name: "rejection error is returned", effects: []sdk.Effect{toolEffect},
			approve: func(context.Context, string) (sdk.Decision, error) {
				return "", &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: rejected.Error()}
			},
			wantApproval: true, wantErr: sdk.ErrPermissionDenied},
		{name: "cancelled while waiting", effects: []sdk.Effect{toolEffect},
			approve: func(context.Context, string) (sdk.Decision, error) {
				return "", fmt.Errorf("sdk: RequestApproval: %w", context.Canceled)
			},
			wantApproval: true, wantErr: context.Canceled},
		{name: "a rejected decision fails closed", effects: []sdk.Effect{toolEffect},
			approve:      func(context.Context, string) (sdk.Decision, error) { return sdk.Rejected, nil },
			wantApproval: true, wantOutcome: sdk.OutcomeFail, wantReason: "approval_rejected"},
		{name: "model effect only", effects: []sdk.Effect{modelEffect},
			wantOutcome: sdk.OutcomeComplete, wantModelCall: true},
		{name: "none", wantOutcome: sdk.OutcomeComplete, wantModelCall: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{RequestApprovalF: tc.approve})
			req := firstStep("goal")
			req.Attempt = 2
			req.Indeterminate = tc.effects
			res, err := New(nil).Step(context.Background(), host, req)
			calls, _, _, approvals := snapshot(host)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Step: %v", err)
				}
				wantOutcome(t, res, tc.wantOutcome, tc.wantReason)
			}
			if got := len(approvals) == 1; got != tc.wantApproval {
				t.Fatalf("approvals = %q, want asked=%v", approvals, tc.wantApproval)
			}
			if tc.wantApproval {
				if calls[0] != "RequestApproval" {
					t.Errorf("host calls = %v, want the approval first", calls)
				}
				if want := "retry after an interrupted " + toolEffect.Summary + "?"; approvals[0] != want {
					t.Errorf("approval prompt = %q, want %q", approvals[0], want)
				}
			}
			if got := slices.Contains(calls, "CallModel"); got != tc.wantModelCall {
				t.Errorf("host calls = %v, want a model call: %v", calls, tc.wantModelCall)
			}
		})
	}
}

func TestHostErrorsFailTheStep(t *testing.T) {
	budget := &sdk.HostError{Kind: sdk.ErrBudgetExhausted, Message: "CallTool: tool_calls budget exhausted (50 of 50)"}
	long := &sdk.HostError{Kind: sdk.ErrHostUnavailable, Message: strings.Repeat("unavailable ", 1000)}
	fails := func(err error) func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
		return func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) { return sdk.ToolResponse{}, err }
	}
	modelFails := func(err error) func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
		return func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
			return sdk.ModelResponse{}, err
		}
	}
	tests := []struct {
		name     string
		host     *sdktest.Host
		wantMsgs []string
	}{
		{"tool budget exhausted", legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "t"}), CallModelF: sdktest.Replies(callTools(sdk.ToolCall{ID: "c", Name: "t"})), CallToolF: fails(budget)}),
			[]string{"tool call refused", "budget exhausted", "tool_calls"}},
		{"model budget exhausted", legacyHost(&sdktest.Host{CallModelF: modelFails(&sdk.HostError{Kind: sdk.ErrBudgetExhausted, Message: "CallModel: model_calls budget exhausted"})}),
			[]string{"model call refused", "budget exhausted", "model_calls"}},
		{"tool listing refused", legacyHost(&sdktest.Host{ToolsF: toolsFail(&sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: "stale token"})}),
			[]string{"tool listing failed", "permission denied"}},
		{"model failed, message bounded", legacyHost(&sdktest.Host{CallModelF: modelFails(long)}),
			[]string{"model call failed", "host unavailable"}},
		{"tool failed", legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "t"}), CallModelF: sdktest.Replies(callTools(sdk.ToolCall{ID: "c", Name: "t"})), CallToolF: fails(&sdk.HostError{Kind: sdk.ErrInvalidArgument, Message: "bad path"})}),
			[]string{"tool call failed", "invalid argument"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustStep(t, tc.host, firstStep("goal"))
			wantOutcome(t, res, sdk.OutcomeFail, "executor_failed")
			for _, want := range tc.wantMsgs {
				if !strings.Contains(res.Message, want) {
					t.Errorf("message %q does not say %q", res.Message, want)
				}
			}
			if n := utf8.RuneCountInString(res.Message); n > maxFailRunes {
				t.Errorf("message has %d characters, limit %d", n, maxFailRunes)
			}
		})
	}
}

func TestHostWithoutToolsOffersNone(t *testing.T) {
	host := legacyHost(&sdktest.Host{ToolsF: toolsFail(&sdk.HostError{Kind: sdk.ErrUnimplemented, Message: "no tools"})})
	res := mustStep(t, host, firstStep("goal"))
	wantOutcome(t, res, sdk.OutcomeComplete, "")
	if _, models, _, _ := snapshot(host); models[0].Tools != nil {
		t.Errorf("tools offered = %+v, want none", models[0].Tools)
	}
}
