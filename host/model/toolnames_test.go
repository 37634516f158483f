package model

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/tools"
)

// openAIFunctionName is OpenAI's documented pattern for a function name.
var openAIFunctionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestWireToolNameBuiltins(t *testing.T) {
	builtins := []string{tools.ToolWorkspaceRead, tools.ToolWorkspaceWrite, tools.ToolWorkspaceList, tools.ToolShellRun, tools.ToolTimeSleep}
	tn, err := newToolNames(builtins)
	if err != nil {
		t.Fatalf("the built-in tools are refused: %v", err)
	}
	for _, name := range builtins {
		wire := tn.wire(name)
		if !openAIFunctionName.MatchString(wire) {
			t.Errorf("%s is sent as %q, outside %s", name, wire, openAIFunctionName)
		}
		if back := tn.host(wire); back != name {
			t.Errorf("%s → %q → %q, want it back", name, wire, back)
		}
	}
	if got := tn.wire(tools.ToolWorkspaceWrite); got != "workspace_write" {
		t.Errorf("workspace.write is sent as %q, want workspace_write", got)
	}
}

func TestToolNamesTricky(t *testing.T) {
	long64 := strings.Repeat("x", 63) + "."
	tests := []struct {
		name    string
		tools   []string
		wantErr string // empty: every name round-trips
	}{
		{"underscore kept", []string{"my_tool", "a__b"}, ""},
		{"dash kept", []string{"a-b", "-", "_"}, ""},
		{"dots", []string{"a.b.c", "x.y"}, ""},
		{"unicode alone", []string{"café.read", "日本"}, ""},
		{"same name twice", []string{"a.b", "a.b"}, ""},
		{"64 characters", []string{long64}, ""},
		{"65 characters", []string{long64 + "y"}, "name is 65 characters; the provider accepts at most 64"},
		{"64 runes of 2 bytes fit", []string{strings.Repeat("é", 64)}, ""},
		{"65 runes refused", []string{strings.Repeat("é", 65)}, "name is 65 characters"},
		{"dot meets underscore", []string{"a.b", "a_b"}, `tools "a.b" and "a_b" would both be sent to the provider as "a_b"`},
		{"underscore meets dot", []string{"a_b", "a.b"}, `tools "a_b" and "a.b" would both be sent to the provider as "a_b"`},
		{"two unicode letters meet", []string{"ä", "ö"}, `tools "ä" and "ö" would both be sent to the provider as "_"`},
		{"slash meets dot", []string{"fs/read", "fs.read"}, `tools "fs/read" and "fs.read"`},
		{"empty name", []string{""}, "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn, err := newToolNames(tt.tools)
			if tt.wantErr != "" {
				merr := wantKind(t, err, KindRequest)
				if !strings.Contains(merr.Message, tt.wantErr) {
					t.Fatalf("error %q does not say %q", merr.Message, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			for _, name := range tt.tools {
				wire := tn.wire(name)
				if !openAIFunctionName.MatchString(wire) {
					t.Errorf("%q is sent as %q, outside the pattern", name, wire)
				}
				if back := tn.host(wire); back != name {
					t.Errorf("%q → %q → %q, want it back", name, wire, back)
				}
			}
		})
	}
}

// TestOpenAIToolNamesRoundTrip sends the built-in tools and a history call
// to a local endpoint that refuses any function name outside OpenAI's
// pattern, as a real endpoint is documented to, and answers with calls by
// the names it was offered: the host must see its own names.
func TestOpenAIToolNamesRoundTrip(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) {
		var body struct {
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
			Messages []struct {
				ToolCalls []struct {
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, 400, `{"error":{"message":"bad json"}}`)
			return
		}
		var names []string
		for _, tl := range body.Tools {
			names = append(names, tl.Function.Name)
		}
		for _, m := range body.Messages {
			for _, tc := range m.ToolCalls {
				names = append(names, tc.Function.Name)
			}
		}
		for _, name := range names {
			if !openAIFunctionName.MatchString(name) {
				writeJSON(w, 400, fmt.Sprintf(`{"error":{"message":"Invalid 'tools[0].function.name': string does not match pattern. Got %q"}}`, name))
				return
			}
		}
		if len(body.Tools) != 5 {
			writeJSON(w, 400, fmt.Sprintf(`{"error":{"message":"%d tools, want 5"}}`, len(body.Tools)))
			return
		}
		writeJSON(w, 200, `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"c1","type":"function","function":{"name":"workspace_write","arguments":"{\"path\":\"a.md\",\"content\":\"hi\"}"}},
			{"id":"c2","type":"function","function":{"name":"shell_run","arguments":"{\"command\":\"ls\"}"}},
			{"id":"c3","type":"function","function":{"name":"no_such_tool","arguments":"{}"}}
		]}}]}`)
	})
	p, _ := newTestOpenAI(t, f)
	var specs []ToolSpec
	for _, name := range []string{tools.ToolWorkspaceRead, tools.ToolWorkspaceWrite, tools.ToolWorkspaceList, tools.ToolShellRun, tools.ToolTimeSleep} {
		specs = append(specs, ToolSpec{Name: name})
	}
	req := Request{
		Messages: []Message{
			{Role: RoleUser, Content: "go"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: tools.ToolTimeSleep, Arguments: `{"seconds":1}`}}},
			{Role: RoleTool, ToolCallID: "call_1", Content: "slept"},
		},
		Tools: specs,
	}
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("the endpoint refused the request: %v", err)
	}
	var got []string
	for _, tc := range resp.Message.ToolCalls {
		got = append(got, tc.Name)
	}
	// An unknown name comes back as the model wrote it, for the host to refuse.
	want := []string{tools.ToolWorkspaceWrite, tools.ToolShellRun, "no_such_tool"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the host sees calls to %q, want %q", got, want)
	}
}

// TestOpenAIToolNameClash checks that two offered tools that would reach the
// provider under one name are refused before anything is sent.
func TestOpenAIToolNameClash(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int) { writeJSON(w, 200, `{}`) })
	p, _ := newTestOpenAI(t, f)
	req := Request{Messages: textRequest().Messages, Tools: []ToolSpec{{Name: "notes.read"}, {Name: "notes_read"}}}
	_, err := p.Complete(context.Background(), req)
	merr := wantKind(t, err, KindRequest)
	for _, s := range []string{`"notes.read"`, `"notes_read"`} {
		if !strings.Contains(merr.Message, s) {
			t.Errorf("error %q does not name %s", merr.Message, s)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent for a refused request", n)
	}
}
