package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// intKeys is the single description of every integer key: its allowed range
// when every other key keeps its default. The range tests below are generated
// from it, and TestIntKeysCoverEveryIntegerKey fails if a key is missing.
var intKeys = []struct {
	key      string
	def      int    // the default
	min, max int    // allowed range, other keys at their defaults
	minWith  string // extra lines in the same section that make min reachable
}{
	{key: "tasks.max_concurrent", def: 2, min: 1, max: MaxConcurrentCap},
	{key: "tasks.max_queued", def: 32, min: 1, max: 1024},
	{key: "tasks.max_subagents", def: 8, min: 1, max: 64},
	{key: "tasks.max_tree_depth", def: 2, min: 1, max: 8},
	{key: "tasks.max_running_per_principal", def: 0, min: 0, max: 2},
	{key: "api.max_connections", def: 64, min: 1, max: 4096},
	{key: "api.first_request_timeout_seconds", def: 5, min: 1, max: 60},
	{key: "api.max_watches_per_principal", def: 32, min: 1, max: 256},
	{key: "tasks.max_steps", def: 20, min: 1, max: 200},
	{key: "tasks.max_steps_cap", def: 200, min: 1, max: 100000, minWith: "max_steps = 1"},
	{key: "tasks.max_tool_calls", def: 50, min: 0, max: 1000},
	{key: "tasks.max_tool_calls_cap", def: 1000, min: 0, max: 100000, minWith: "max_tool_calls = 0"},
	{key: "tasks.max_model_calls", def: 100, min: 0, max: 2000},
	{key: "tasks.max_model_calls_cap", def: 2000, min: 0, max: 100000, minWith: "max_model_calls = 0"},
	{key: "tasks.max_depth", def: 1, min: 0, max: 4},
	{key: "tasks.max_depth_cap", def: 4, min: 0, max: 16, minWith: "max_depth = 0"},
	{key: "tasks.max_wall_seconds", def: 1800, min: 1, max: 86400},
	{key: "tasks.max_wall_seconds_cap", def: 86400, min: 1, max: 604800, minWith: "max_wall_seconds = 1"},
	{key: "tasks.max_model_tokens", def: 1000000, min: 0, max: 100000000},
	{key: "tasks.max_model_tokens_cap", def: 100000000, min: 0, max: 10000000000, minWith: "max_model_tokens = 0"},
	{key: "tasks.max_output_bytes", def: 67108864, min: 0, max: 1073741824},
	{key: "tasks.max_output_bytes_cap", def: 1073741824, min: 0, max: 1099511627776, minWith: "max_output_bytes = 0"},
	{key: "tasks.checkpoint_max_bytes", def: 262144, min: 1024, max: 3145728},
	{key: "machine_spirit.worker_memory_mb", def: 1024, min: 256, max: 65536},
	{key: "machine_spirit.worker_cpu_seconds", def: 3600, min: 1, max: 86400},
	{key: "tasks.max_parallel_model_calls", def: 4, min: 1, max: MaxParallelModelCalls},
	{key: "tasks.retention_days", def: 0, min: 0, max: 3650},
	{key: "tasks.prestart", def: 2, min: 0, max: MaxPrestart},
	{key: "limits.goal_chars", def: 2000, min: 1, max: 20000},
	{key: "limits.summary_chars", def: 2000, min: 100, max: 20000},
	{key: "limits.recent_summaries", def: 5, min: 0, max: 50},
	{key: "limits.result_bytes", def: 65536, min: 1024, max: 1048576},
	{key: "limits.event_bytes", def: 1024, min: 256, max: 4096},
	{key: "limits.events_per_task", def: 500, min: 10, max: 100000},
	{key: "limits.plugin_start_seconds", def: 10, min: 1, max: 120},
	{key: "limits.plugin_stop_grace_seconds", def: 2, min: 1, max: 60},
	{key: "limits.grpc_message_bytes", def: 4194304, min: 1048576, max: 16777216},
	{key: "model.timeout_seconds", def: 60, min: 1, max: 600},
	{key: "model.max_retries", def: 3, min: 0, max: 10},
	// 0 (not sent, unknown) is accepted too: TestModelRequestOptions.
	{key: "model.max_tokens", def: 1024, min: 16, max: 1 << 20},
	{key: "model.context_tokens", def: 0, min: 512, max: 1 << 24, minWith: "max_tokens = 16"},
	{key: "model.max_call_seconds", def: 600, min: 1, max: 3600},
	{key: "approvals.timeout_seconds", def: 3600, min: 1, max: 604800},
	{key: "fleet.heartbeat_seconds", def: 5, min: 1, max: 14},
	{key: "fleet.lease_seconds", def: 30, min: 3, max: 3600, minWith: "heartbeat_seconds = 1"},
	{key: "fleet.poll_millis", def: 250, min: 10, max: 5000},
	{key: "confinement.max_address_space_mb", def: 4096, min: 64, max: 1048576},
	{key: "confinement.max_open_files", def: 1024, min: 64, max: 65536},
	{key: "confinement.max_processes", def: 4096, min: 16, max: 65536},
	{key: "confinement.memory_mb", def: 2048, min: 64, max: 1048576},
	{key: "confinement.cpu_percent", def: 100, min: 1, max: 6400},
	{key: "confinement.disk_mb", def: 1024, min: 16, max: 1048576},
	{key: "confinement.uid_first", def: 2000000000, min: 65536, max: 2147418111},
	{key: "confinement.uid_count", def: 65536, min: 0, max: 1048576},
	{key: "store.max_open_conns", def: 16, min: 2, max: 1000, minWith: "max_idle_conns = 0"},
	{key: "store.max_idle_conns", def: 16, min: 0, max: 16},
	{key: "store.conn_max_lifetime_seconds", def: 1800, min: 1, max: 86400},
}

func TestIntKeysCoverEveryIntegerKey(t *testing.T) {
	var described []string
	for _, k := range intKeys {
		described = append(described, k.key)
	}
	schema := sectionKeys(reflect.Int)
	slices.Sort(described)
	slices.Sort(schema)
	if !slices.Equal(described, schema) {
		t.Fatalf("intKeys describes %v\nbut Config has integer keys %v", described, schema)
	}
}

func TestIntKeyDefaults(t *testing.T) {
	def := Default()
	for _, k := range intKeys {
		if got := int(fieldAt(t, &def, k.key).Int()); got != k.def {
			t.Errorf("Default() %s = %d, want %d", k.key, got, k.def)
		}
	}
}

func TestIntKeyRanges(t *testing.T) {
	type rangeCase struct {
		name  string
		src   string
		key   string
		value int
		ok    bool
		rng   string // "between MIN and MAX", expected in the error
	}
	var cases []rangeCase
	for _, k := range intKeys {
		section, name := splitKey(k.key)
		rng := fmt.Sprintf("between %d and %d", k.min, k.max)
		for _, c := range []struct {
			label string
			value int
			ok    bool
			with  string
		}{
			{"min", k.min, true, k.minWith},
			{"max", k.max, true, ""},
			{"below_min", k.min - 1, false, ""},
			{"above_max", k.max + 1, false, ""},
		} {
			cases = append(cases, rangeCase{
				name:  k.key + "/" + c.label,
				src:   fmt.Sprintf("[%s]\n%s\n%s = %d\n", section, c.with, name, c.value),
				key:   k.key,
				value: c.value,
				ok:    c.ok,
				rng:   rng,
			})
		}
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.src)
			if tc.ok {
				if err != nil {
					t.Fatalf("%s = %d should be accepted:\n%v", tc.key, tc.value, err)
				}
				if got := int(fieldAt(t, &cfg, tc.key).Int()); got != tc.value {
					t.Fatalf("%s decoded as %d, want %d", tc.key, got, tc.value)
				}
				return
			}
			p := wantOnly(t, err, tc.key, tc.key, tc.rng, strconv.Itoa(tc.value))
			t.Logf("%s", p.Message)
		})
	}
}

// budgetPairs are the budget defaults and their caps.
var budgetPairs = []struct{ def, cap string }{
	{"max_steps", "max_steps_cap"},
	{"max_tool_calls", "max_tool_calls_cap"},
	{"max_model_calls", "max_model_calls_cap"},
	{"max_depth", "max_depth_cap"},
	{"max_wall_seconds", "max_wall_seconds_cap"},
}

func TestDefaultAboveCap(t *testing.T) {
	for _, bp := range budgetPairs {
		t.Run(bp.def, func(t *testing.T) {
			// A cap lowered below the default, and a default raised above
			// the cap: both name both keys and the cap's value.
			for _, src := range []string{
				fmt.Sprintf("[tasks]\n%s = 3\n%s = 2\n", bp.def, bp.cap),
				fmt.Sprintf("[tasks]\n%s = 2\n%s = 3\n", bp.cap, bp.def),
			} {
				_, err := parse(t, src)
				p := wantOnly(t, err, "tasks."+bp.def, "tasks."+bp.def+" = 3", "tasks."+bp.cap, "and 2", "raise tasks."+bp.cap)
				t.Logf("%s", p.Message)
			}
			// Equal is fine.
			mustParse(t, fmt.Sprintf("[tasks]\n%s = 3\n%s = 3\n", bp.def, bp.cap))
		})
	}
}

func TestCapOutOfRangeDoesNotAlsoBlameDefault(t *testing.T) {
	// With the cap itself invalid, the default is checked against the
	// cap's own maximum instead: one problem, about the cap.
	_, err := parse(t, "[tasks]\nmax_steps_cap = 100001\nmax_steps = 500\n")
	wantOnly(t, err, "tasks.max_steps_cap", "between 1 and 100000")

	_, err = parse(t, "[tasks]\nmax_steps_cap = 0\nmax_steps = 100001\n")
	ps := wantProblem(t, err, "tasks.max_steps_cap", "between 1 and 100000")
	wantProblem(t, err, "tasks.max_steps", "between 1 and 100000")
	if len(ps) != 2 {
		t.Fatalf("want 2 problems, got:\n%v", err)
	}
}

func TestMessageSizeBudget(t *testing.T) {
	tests := []struct {
		name string
		src  string
		ok   bool
		want string
	}{
		{
			name: "largest checkpoint and result in a 4 MiB message",
			src:  "[tasks]\ncheckpoint_max_bytes = 3145728\n[limits]\nresult_bytes = 1048576\n",
			want: "step result",
		},
		{
			name: "the same with a larger message",
			src:  "[tasks]\ncheckpoint_max_bytes = 3145728\n[limits]\nresult_bytes = 1048576\ngrpc_message_bytes = 8388608\n",
			ok:   true,
		},
		{
			name: "large checkpoint in the smallest message",
			src:  "[tasks]\ncheckpoint_max_bytes = 1048576\n[limits]\ngrpc_message_bytes = 1048576\n",
			want: "step request",
		},
		{
			name: "many long summaries",
			src:  "[limits]\nrecent_summaries = 50\nsummary_chars = 20000\n",
			want: "step request",
		},
		{
			name: "defaults in the smallest message",
			src:  "[limits]\ngrpc_message_bytes = 1048576\n",
			ok:   true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			if tc.ok {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				return
			}
			wantProblem(t, err, "limits.grpc_message_bytes", tc.want, "raise it")
		})
	}
}

// machinespirit's own bound on a step's model calls defaults to the host's
// and may only be lower: 1..tasks.max_parallel_model_calls.
func TestMachineSpiritParallelBound(t *testing.T) {
	const key = "machine_spirit.max_parallel_model_calls"
	tests := []struct {
		name string
		src  string
		want int      // MachineSpiritParallel() when valid
		errs []string // the problem's words when refused
	}{
		{name: "absent: the host's default", src: "", want: 4},
		{name: "absent: the host's own", src: "[tasks]\nmax_parallel_model_calls = 7\n", want: 7},
		{name: "lower than the host's", src: "[machine_spirit]\nmax_parallel_model_calls = 2\n", want: 2},
		{name: "at the host's default", src: "[machine_spirit]\nmax_parallel_model_calls = 4\n", want: 4},
		{name: "one past the host's default", src: "[machine_spirit]\nmax_parallel_model_calls = 5\n",
			errs: []string{key + " = 5", "between 1 and 4", "tasks.max_parallel_model_calls", "raise that one"}},
		{name: "at the host's limit", src: "[tasks]\nmax_parallel_model_calls = 16\n[machine_spirit]\nmax_parallel_model_calls = 16\n", want: 16},
		{name: "one past the host's limit", src: "[tasks]\nmax_parallel_model_calls = 16\n[machine_spirit]\nmax_parallel_model_calls = 17\n",
			errs: []string{key + " = 17", "between 1 and 16"}},
		{name: "zero", src: "[machine_spirit]\nmax_parallel_model_calls = 0\n", errs: []string{key + " = 0", "between 1 and 4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.src)
			if tc.errs != nil {
				t.Logf("%s", wantOnly(t, err, key, tc.errs...).Message)
				return
			}
			if err != nil {
				t.Fatalf("should be accepted:\n%v", err)
			}
			if got := cfg.MachineSpiritParallel(); got != tc.want {
				t.Fatalf("MachineSpiritParallel() = %d, want %d", got, tc.want)
			}
		})
	}
}
