package machinespirit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// TestPreflight: each broken runtime fails the preflight naming the check;
// Describe still answers and every step is refused.
func TestPreflight(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "swipl-not-executable")
	b, err := os.ReadFile(testSwipl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notExec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	notSwipl := filepath.Join(dir, "not-swipl")
	if err := os.WriteFile(notSwipl, []byte("#!/bin/sh\necho 'I am not Prolog'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	goodGraph := g("extra", okState, okNodes, okEdges)
	badGraph := g("broken", `state([field(a, integer, 0, sum), field(a, integer, 0, sum)])`, okNodes, okEdges)

	tests := []struct {
		name string
		cfg  func() Config
		want string
	}{
		{"swipl missing", func() Config {
			return Config{SwiplPath: "/nonexistent/swipl", SwiplVersion: testVersion}
		}, "failed: swipl_path: stat /nonexistent/swipl: no such file or directory"},
		{"relative path", func() Config { return Config{SwiplPath: "swipl", SwiplVersion: testVersion} }, "failed: swipl_path: \"swipl\" is not an absolute path"},
		{"no path", func() Config { return Config{SwiplVersion: testVersion} }, "failed: swipl_path: no path given"},
		{"a directory", func() Config { return Config{SwiplPath: dir, SwiplVersion: testVersion} }, "failed: swipl_path: " + dir + " is not a regular file"},
		{"not executable", func() Config { return Config{SwiplPath: notExec, SwiplVersion: testVersion} }, "failed: swipl_executable:"},
		{"wrong pinned version", func() Config { return Config{SwiplPath: testSwipl, SwiplVersion: "9.0.3"} }, "failed: swipl_version: /usr/bin/swipl is SWI-Prolog 9.0.4, pinned 9.0.3"},
		{"pinned version not X.Y.Z", func() Config { return Config{SwiplPath: testSwipl, SwiplVersion: "9.0"} }, "failed: swipl_version: pinned version \"9.0\" is not X.Y.Z"},
		{"no pinned version", func() Config { return Config{SwiplPath: testSwipl} }, "failed: swipl_version: pinned version \"\" is not X.Y.Z"},
		{"not SWI-Prolog", func() Config { return Config{SwiplPath: notSwipl, SwiplVersion: testVersion} }, "failed: swipl_version: unexpected output"},
		{"unknown start mode", func() Config {
			return Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StartMode: "warp"}
		}, "failed: start_mode:"},
		{"graph hash does not match its pin", func() Config {
			c := testConfig(t, map[string]string{"extra": goodGraph})
			c.GraphPins["extra"] = strings.Repeat("a", 64)
			return c
		}, "failed: graph_pin: extra: "},
		{"pinned graph file missing", func() Config {
			c := testConfig(t, map[string]string{"extra": goodGraph})
			c.GraphPins["absent"] = strings.Repeat("a", 64)
			return c
		}, "failed: graph_pin: absent: open"},
		{"pin that is not a hash", func() Config {
			c := testConfig(t, map[string]string{"extra": goodGraph})
			c.GraphPins["extra"] = "md5:abc"
			return c
		}, "failed: graph_pin: extra: pin \"md5:abc\" is not a lowercase hex SHA-256"},
		{"pins without a directory", func() Config {
			return Config{SwiplPath: testSwipl, SwiplVersion: testVersion, GraphPins: map[string]string{"x": strings.Repeat("a", 64)}}
		}, "failed: graph_pin: graph pins given without --graphs-dir"},
		{"pinned graph that does not compile", func() Config {
			return testConfig(t, map[string]string{"broken": badGraph})
		}, "failed: graph_pin: broken: duplicate_field:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(context.Background(), tc.cfg())
			defer e.Close()
			d := e.Describe()
			if d.Kind != Kind || len(d.CheckpointSchemas) != 1 {
				t.Fatalf("describe: %+v", d)
			}
			if p := d.Runtime["preflight"]; !strings.HasPrefix(p, tc.want) {
				t.Fatalf("preflight = %q, want prefix %q", p, tc.want)
			}
			if d.Runtime["sources_sha256"] == "" {
				t.Fatal("no sources digest")
			}
			res, err := e.Step(context.Background(), newFakeHost(1), stepReq(parSpec(), nil))
			if err != nil || res.Outcome != sdk.OutcomeFail || res.Reason != "executor_failed" || !strings.Contains(res.Message, "preflight") {
				t.Fatalf("step after a failed preflight: %+v, %v", res, err)
			}
			if e.workerPID() != 0 {
				t.Fatal("a worker runs after a failed preflight")
			}
		})
	}
	t.Run("wrong version reports the version found", func(t *testing.T) {
		e := New(context.Background(), Config{SwiplPath: testSwipl, SwiplVersion: "9.0.3"})
		defer e.Close()
		if v := e.Describe().Runtime["prolog_version"]; v != testVersion {
			t.Fatalf("prolog_version = %q", v)
		}
	})
}

// TestPreflightOK: the runtime facts of a good preflight, and the digest
// of exactly the embedded sources.
func TestPreflightOK(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{SwiplPath: testSwipl, SwiplVersion: testVersion})
	r := e.Describe().Runtime
	src, err := embeddedSources(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"prolog_version": testVersion, "preflight": "ok", "sources_sha256": src.digest(),
		"start_mode": "state", "graphs": "ask_human,plan_act_review,rlm",
	}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("Runtime[%q] = %q, want %q", k, r[k], v)
		}
	}
	if len(r["sources_sha256"]) != 64 {
		t.Fatalf("sources_sha256 %q", r["sources_sha256"])
	}
	// The test handlers change the digest: it covers what the worker runs.
	e2 := newExecutor(t, testConfig(t, nil))
	if e2.Describe().Runtime["sources_sha256"] == r["sources_sha256"] {
		t.Fatal("the digest ignores extra sources")
	}
	// A pinned operator graph is listed and runs.
	e3 := newExecutor(t, testConfig(t, map[string]string{"extra": g("extra", okState, `nodes([node(a, patch([count=3]))])`, okEdges)}))
	if got := e3.Describe().Runtime["graphs"]; got != "ask_human,extra,plan_act_review,rlm,rlm_goals" {
		t.Fatalf("graphs = %q", got)
	}
	res, err := e3.Step(context.Background(), newFakeHost(1), stepReq(spec("extra", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete || string(res.Result) != `{"count":3}` {
		t.Fatalf("operator graph: %+v, %v", res, err)
	}
}

// TestStartFromSource: the same worker without a saved state.
func TestStartFromSource(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, nil)
	cfg.StartMode = StartFromSource
	e := newExecutor(t, cfg)
	results, _ := runToEnd(t, e, newFakeHost(1), parSpec(), nil, 10)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete {
		t.Fatalf("last: %+v", last)
	}
}

// TestCheckHello: what the preflight requires of the worker's hello.
func TestCheckHello(t *testing.T) {
	t.Parallel()
	ok := inFrame{Type: "hello", Protocol: protocolVersion, PrologVersion: testVersion, Libraries: []string{"sandbox"},
		Graphs: []graphInfo{{ID: "rlm"}, {ID: "plan_act_review"}}}
	tests := []struct {
		name string
		edit func(f *inFrame)
		want string
	}{
		{"good", func(*inFrame) {}, ""},
		{"not a hello", func(f *inFrame) { f.Type = "pong" }, "hello: first frame is \"pong\""},
		{"other protocol", func(f *inFrame) { f.Protocol = 2 }, "hello: worker speaks protocol 2"},
		{"other version", func(f *inFrame) { f.PrologVersion = "9.2.0" }, "hello: worker runs SWI-Prolog 9.2.0, pinned 9.0.4"},
		{"missing library", func(f *inFrame) { f.Missing = []string{"sandbox"} }, "libraries: required libraries missing: sandbox"},
		{"graph that does not compile", func(f *inFrame) { f.Errors = []string{"graph rlm: syntax: x"} }, "graphs: shipped graphs do not compile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.edit(&f)
			ids, err := checkHello(&f, testVersion)
			if tc.want == "" {
				if err != nil || strings.Join(ids, ",") != "plan_act_review,rlm" {
					t.Fatalf("checkHello = %v, %v", ids, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("checkHello error = %v, want prefix %q", err, tc.want)
			}
		})
	}
}
