package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestParseMCPArgs(t *testing.T) {
	params := []mcpParam{
		{name: "id", typ: "string", required: true, maxBytes: 4},
		{name: "n", typ: "integer", min: 1, max: 10},
		{name: "s", typ: "strings", maxItems: 2, enum: []string{"a", "b"}},
		{name: "o", typ: "object", maxBytes: 10},
		{name: "v", typ: "any", maxBytes: 5},
		{name: "e", typ: "string", maxBytes: 8, enum: []string{"x", "y"}},
		{name: "b", typ: "boolean"},
	}
	for _, tc := range []struct {
		args string
		want string // "" is no error
	}{
		{`{"id":"abcd"}`, ""},
		{`{"id":"abcde"}`, `id: is 5 bytes, the limit is 4 (value "abcde")`},
		{`{"id":"ééé"}`, `id: is 6 bytes, the limit is 4`},
		{`{}`, "id: is required"},
		{`null`, "id: is required"},
		{`{"id":null}`, "id: is required"},
		{`[1]`, "arguments: must be a JSON object"},
		{`{"id":"a","zz":1}`, "zz: unknown argument; this tool takes id, n, s, o, v, e, b"},
		{`{"id":1}`, "id: must be a string, not 1"},
		{`{"id":"a","n":10}`, ""},
		{`{"id":"a","n":1}`, ""},
		{`{"id":"a","n":11}`, "n: is 11, outside the limits 1..10"},
		{`{"id":"a","n":0}`, "n: is 0, outside the limits 1..10"},
		{`{"id":"a","n":2.5}`, "n: must be an integer from 1 to 10, not 2.5"},
		{`{"id":"a","n":"3"}`, `n: must be an integer, not "3"`},
		{`{"id":"a","n":99999999999999999999}`, "n: must be an integer from 1 to 10, not 99999999999999999999"},
		{`{"id":"a","s":["a","b"]}`, ""},
		{`{"id":"a","s":["a","b","a"]}`, "s: has 3 items, the limit is 2"},
		{`{"id":"a","s":["a","c"]}`, `s[1]: is "c": use one of a, b`},
		{`{"id":"a","s":"a"}`, `s: must be an array of strings, not "a"`},
		{`{"id":"a","o":{"k":1234}}`, ""}, // 10 bytes
		{`{"id":"a","o":{"k":12345}}`, "o: is 11 bytes of JSON, the limit is 10"},
		{`{"id":"a","o":[1]}`, "o: must be a JSON object, not [1]"},
		{`{"id":"a","v":"abc"}`, ""},
		{`{"id":"a","v":"abcd"}`, `v: is 6 bytes of JSON, the limit is 5`},
		{`{"id":"a","e":"y"}`, ""},
		{`{"id":"a","e":"z"}`, `e: is "z": use one of x, y`},
		{`{"id":"a","b":true}`, ""},
		{`{"id":"a","b":false}`, ""},
		{`{"id":"a","b":"true"}`, `b: must be true or false, not "true"`},
		{`{"id":"a","b":1}`, `b: must be true or false, not 1`},
		{`{"id":"` + strings.Repeat("q", 500) + `"}`, `id: is 500 bytes, the limit is 4 (value "qqqq`},
	} {
		_, err := parseMCPArgs(json.RawMessage(tc.args), params)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: error %q, want %q", tc.args, got, tc.want)
		}
		if len(got) > 200 {
			t.Errorf("%s: the error quotes too much: %d bytes", tc.args, len(got))
		}
	}
}

// Each tool's schema is built from its parameter table: every bound the
// server checks is one the client sees.
func TestMCPSchemaShowsTheBounds(t *testing.T) {
	m := &mcpServer{maxFileBytes: mcpDefaultFileBytes}
	names := map[string]bool{}
	for _, tool := range m.tools() {
		if names[tool.name] {
			t.Fatalf("tool %s twice", tool.name)
		}
		names[tool.name] = true
		s := mcpSchema(tool.params)
		props := s["properties"].(map[string]any)
		if len(props) != len(tool.params) || s["additionalProperties"] != false {
			t.Errorf("%s: schema %v", tool.name, s)
		}
		for _, p := range tool.params {
			ps := props[p.name].(map[string]any)
			var bound bool
			switch p.typ {
			case "string":
				bound = ps["maxLength"] == p.maxBytes && p.maxBytes > 0
			case "integer":
				bound = ps["minimum"] == p.min && ps["maximum"] == p.max && p.max > p.min
			case "strings":
				bound = ps["maxItems"] == p.maxItems && p.maxItems > 0
			case "object", "any":
				bound = p.maxBytes > 0
			case "boolean":
				bound = ps["type"] == "boolean" // bounded by its type
			}
			if !bound || ps["description"] == "" {
				t.Errorf("%s.%s: unbounded or undescribed: %+v", tool.name, p.name, ps)
			}
		}
	}
	if len(names) != 11 {
		t.Errorf("%d tools", len(names))
	}
}

func TestMCPMaxFileBytesFlag(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		code int
	}{{0, exitUsage}, {1, exitOK}, {mcpMaxFileBytes, exitOK}, {mcpMaxFileBytes + 1, exitUsage}} {
		var out, errOut bytes.Buffer
		// An empty stdin: the server ends at once, as when a client closes it.
		e := &env{stdout: &out, stderr: &errOut, stdin: strings.NewReader("")}
		code := dispatch(context.Background(), e, []string{"mcp", "--socket", "/nonexistent/taskhost.sock", "--max-file-bytes", fmt.Sprint(tc.v)})
		if code != tc.code {
			t.Errorf("--max-file-bytes %d: exit %d, want %d\n%s", tc.v, code, tc.code, errOut.String())
		}
		if tc.code == exitUsage && !strings.Contains(errOut.String(), fmt.Sprintf("--max-file-bytes is %d, outside the limits 1..%d", tc.v, mcpMaxFileBytes)) {
			t.Errorf("--max-file-bytes %d: %s", tc.v, errOut.String())
		}
		if out.Len() != 0 {
			t.Errorf("--max-file-bytes %d: wrote %q to stdout", tc.v, out.String())
		}
	}
}
