package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() is invalid:\n%v", err)
	}
}

func TestDefaultReturnsFreshValue(t *testing.T) {
	a := Default()
	a.Executors["x"] = Executor{Path: "/bin/x"}
	if b := Default(); len(b.Executors) != 0 {
		t.Fatalf("Default() shares its Executors map: %v", b.Executors)
	}
}

func TestEmptyConfigIsDefault(t *testing.T) {
	for _, src := range []string{
		"",
		"\n\n  \n",
		"# only a comment\n",
		"\ufeff",                      // a UTF-8 byte order mark
		"[tasks]\n[machine_spirit]\n", // empty sections
	} {
		cfg := mustParse(t, src)
		if !reflect.DeepEqual(cfg, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", src, cfg)
		}
	}
}

func TestExampleMatchesDefault(t *testing.T) {
	path := filepath.Join("testdata", "example.toml")
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s):\n%v", path, err)
	}
	if !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("example.toml differs from Default():\n got %+v\nwant %+v", cfg, Default())
	}
}

func TestExampleShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		t.Fatal(err)
	}
	var inExample []string
	for _, k := range md.Keys() {
		if len(k) == 2 && k[0] != "tools" {
			inExample = append(inExample, k.String())
		}
	}
	var schema []string
	for _, kind := range []reflect.Kind{reflect.Int, reflect.Bool, reflect.String, reflect.Slice} {
		schema = append(schema, sectionKeys(kind)...)
	}
	// model.api_key exists only to refuse a literal key: the example
	// documents it in a comment instead.
	schema = slices.DeleteFunc(schema, func(k string) bool { return k == "model.api_key" })
	if !strings.Contains(string(data), "# api_key ") {
		t.Errorf("example.toml does not document that model.api_key is refused")
	}
	slices.Sort(inExample)
	slices.Sort(schema)
	if !slices.Equal(inExample, schema) {
		t.Fatalf("example.toml sets %v\nbut the fixed sections have keys %v", inExample, schema)
	}
	// The executor keys are only in a comment; check they are documented.
	for _, f := range []string{"path", "sha256", "args"} {
		if !strings.Contains(string(data), "# "+f+" = ") {
			t.Errorf("example.toml does not document executors.NAME.%s", f)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name string
		src  string
		key  string
		want []string
	}{
		{"top-level table", "[bogus]\nx = 1\n", "bogus",
			[]string{`unknown key "bogus"`, "tasks, machine_spirit, executors, limits"}},
		{"top-level table with a likely typo", "[machinespirit]\nenabled = true\n", "machinespirit",
			[]string{`unknown key "machinespirit" (did you mean "machine_spirit"?)`}},
		{"top-level value that belongs in a section", "max_steps = 3\n", "max_steps",
			[]string{`"max_steps"`, "[tasks]", `did you mean "tasks.max_steps"?`}},
		{"nested key with a likely typo", "[tasks]\nmax_stepz = 3\n", "tasks.max_stepz",
			[]string{`unknown key "tasks.max_stepz" (did you mean "tasks.max_steps"?)`}},
		{"nested key, nothing close", "[limits]\nzzz = 1\n", "limits.zzz",
			[]string{`unknown key "limits.zzz"`, "goal_chars", "grpc_message_bytes"}},
		{"nested key, wrong case", "[tasks]\nMax_Steps = 3\n", "tasks.Max_Steps",
			[]string{`did you mean "tasks.max_steps"?`}},
		{"dotted key", "tasks.max_stepz = 3\n", "tasks.max_stepz",
			[]string{`did you mean "tasks.max_steps"?`}},
		{"nested table", "[tasks.extra]\na = 1\nb = 2\n", "tasks.extra",
			[]string{`unknown key "tasks.extra"`}},
		{"inline table", "tasks = { enabled = true, colour = \"red\" }\n", "tasks.colour",
			[]string{`unknown key "tasks.colour"`}},
		{"executor sub-key with a likely typo", "[executors.x]\npath = \"/bin/x\"\nsha = \"00\"\n", "executors.x.sha",
			[]string{`unknown key "executors.x.sha" (did you mean "executors.x.sha256"?)`}},
		{"executor sub-key", "[executors.x]\npath = \"/bin/x\"\nenv = [\"A=1\"]\n", "executors.x.env",
			[]string{`unknown key "executors.x.env"`, "path, sha256, args"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			p := wantOnly(t, err, tc.key, tc.want...)
			t.Logf("%s", p.Message)
		})
	}
}

func TestWrongTypes(t *testing.T) {
	tests := []struct {
		name string
		src  string
		key  string
		want []string
	}{
		{"int given a string", "[tasks]\nmax_concurrent = \"two\"\n", "tasks.max_concurrent",
			[]string{`tasks.max_concurrent: expected integer, got string "two"`}},
		{"int given a quoted number", "[tasks]\nmax_concurrent = \"3\"\n", "tasks.max_concurrent",
			[]string{"expected integer", "without quotes"}},
		{"int given a float", "[limits]\ngoal_chars = 2.5\n", "limits.goal_chars",
			[]string{"limits.goal_chars: expected integer, got float 2.5"}},
		{"int given a whole float", "[limits]\ngoal_chars = 2000.0\n", "limits.goal_chars",
			[]string{"got float 2000.0", "without a decimal point"}},
		{"int given a bool", "[tasks]\nmax_steps = true\n", "tasks.max_steps",
			[]string{"expected integer, got boolean true"}},
		{"int given a datetime", "[tasks]\nmax_steps = 1979-05-27\n", "tasks.max_steps",
			[]string{"expected integer, got datetime"}},
		{"int given a table", "[tasks.max_steps]\na = 1\n", "tasks.max_steps",
			[]string{"expected integer, got table"}},
		{"bool given a string", "[tasks]\nenabled = \"yes\"\n", "tasks.enabled",
			[]string{`tasks.enabled: expected boolean (true or false), got string "yes"`}},
		{"bool given a quoted bool", "[machine_spirit]\nenabled = \"true\"\n", "machine_spirit.enabled",
			[]string{"expected boolean", "without quotes"}},
		{"bool given an int", "[tasks]\nenabled = 1\n", "tasks.enabled",
			[]string{"expected boolean (true or false), got integer 1"}},
		{"string given an int", "[tasks]\nexecutor = 5\n", "tasks.executor",
			[]string{"tasks.executor: expected string, got integer 5", "double quotes"}},
		{"string given a float", "[machine_spirit]\nswipl_version = 9.0\n", "machine_spirit.swipl_version",
			[]string{"expected string, got float 9.0"}},
		{"string given an array", "[machine_spirit]\nswipl_path = [\"/usr/bin/swipl\"]\n", "machine_spirit.swipl_path",
			[]string{"expected string, got array"}},
		{"array given a string", "[executors.x]\npath = \"/bin/x\"\nargs = \"--v\"\n", "executors.x.args",
			[]string{"executors.x.args: expected array of strings, got string \"--v\"", "write a list"}},
		{"array with a non-string", "[executors.x]\npath = \"/bin/x\"\nargs = [\"a\", 1]\n", "executors.x.args",
			[]string{"executors.x.args[1]: expected string, got integer 1"}},
		{"section given a value", "tasks = 5\n", "tasks",
			[]string{"tasks: expected a table (a [tasks] section), got integer 5"}},
		{"section given an array of tables", "[[limits]]\ngoal_chars = 1\n", "limits",
			[]string{"got array of tables"}},
		{"executors given a value", "executors = \"x\"\n", "executors",
			[]string{"executors: expected a table"}},
		{"executor given a value", "[executors]\nx = 5\n", "executors.x",
			[]string{"executors.x: expected a table", "got integer 5"}},
		{"executor path given an int", "[executors.x]\npath = 5\n", "executors.x.path",
			[]string{"expected string, got integer 5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			// One problem only: a key that failed to decode draws no
			// second complaint (e.g. "path is missing").
			p := wantOnly(t, err, tc.key, tc.want...)
			t.Logf("%s", p.Message)
		})
	}
}

func TestMalformedExecutorStillCountsAsDefined(t *testing.T) {
	// executors.x is broken, but tasks.executor = "x" must not draw a
	// second "no such executor" problem.
	_, err := parse(t, "[tasks]\nexecutor = \"x\"\n[executors]\nx = 5\n")
	wantOnly(t, err, "executors.x", "expected a table")
}

func TestAllProblemsAtOnce(t *testing.T) {
	src := `
[tasks]
max_stepz = 3
max_concurrent = "two"
max_steps = 300
executor = "machinespirit"

[machine_spirit]
swipl_path = "swipl"

[executors.Bad]
path = "/bin/bad"
sha256 = "xyz"
args = ["a", 2]

[limits]
event_bytes = 5000
`
	_, err := parse(t, src)
	cerr := asError(t, err)
	var keys []string
	for _, p := range cerr.Problems {
		keys = append(keys, p.Key)
	}
	// Decode problems in document order, then range and cross-key
	// problems section by section.
	want := []string{
		"tasks.max_stepz",
		"tasks.max_concurrent",
		"executors.Bad.args",
		"tasks.max_steps",
		"machine_spirit.swipl_path",
		"executors.Bad",
		"executors.Bad.sha256",
		"limits.event_bytes",
		"tasks.executor",
	}
	if !slices.Equal(keys, want) {
		t.Fatalf("problem keys = %q\nwant %q\nerror:\n%v", keys, want, err)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) {
		t.Fatalf("Error() has %d lines, want one per problem (%d):\n%v", len(lines), len(want), err)
	}
}

func TestSyntaxError(t *testing.T) {
	for _, src := range []string{
		"[tasks\n",
		"[tasks]\nmax_steps = \n",
		"[tasks]\nmax_steps = 1\nmax_steps = 2\n", // duplicate key
		"\x00\x00",
	} {
		_, err := parse(t, src)
		cerr := asError(t, err)
		if len(cerr.Problems) != 1 || !strings.Contains(cerr.Problems[0].Message, "TOML syntax error at line") {
			t.Errorf("Parse(%q): want one syntax problem with its line, got:\n%v", src, err)
		}
	}
}

func TestTaskExecutor(t *testing.T) {
	tests := []struct {
		name string
		src  string
		ok   bool
		want []string // in the tasks.executor problem
	}{
		{name: "legacy", src: "[tasks]\nexecutor = \"legacy\"\n", ok: true},
		{name: "machinespirit while disabled (the default)", src: "[tasks]\nexecutor = \"machinespirit\"\n",
			want: []string{"machine_spirit.enabled = false", "enable it first", "enabled = true"}},
		{name: "machinespirit while disabled explicitly", src: "[tasks]\nexecutor = \"machinespirit\"\n[machine_spirit]\nenabled = false\n",
			want: []string{"enable it first"}},
		{name: "machinespirit enabled", src: "[tasks]\nexecutor = \"machinespirit\"\n[machine_spirit]\nenabled = true\n", ok: true},
		{name: "plugin executor", src: "[tasks]\nexecutor = \"mine\"\n[executors.mine]\npath = \"/opt/mine\"\n", ok: true},
		{name: "undefined executor", src: "[tasks]\nexecutor = \"mine\"\n[executors.other]\npath = \"/opt/other\"\n",
			want: []string{`tasks.executor = "mine": no such executor`, `"legacy", "other"`, "[executors.mine]"}},
		{name: "undefined executor lists machinespirit when enabled", src: "[tasks]\nexecutor = \"nope\"\n[machine_spirit]\nenabled = true\n",
			want: []string{`"legacy", "machinespirit"`}},
		{name: "empty", src: "[tasks]\nexecutor = \"\"\n", want: []string{"tasks.executor is empty"}},
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
			p := wantOnly(t, err, "tasks.executor", tc.want...)
			t.Logf("%s", p.Message)
		})
	}
}

func TestMachineSpiritRuntime(t *testing.T) {
	tests := []struct {
		name string
		src  string
		key  string // "" if valid
		want string
	}{
		{"custom absolute path", "swipl_path = \"/opt/swipl/bin/swipl\"\n", "", ""},
		{"another version", "swipl_version = \"10.1.12\"\n", "", ""},
		{"relative path", "swipl_path = \"bin/swipl\"\n", "machine_spirit.swipl_path", "must be an absolute path"},
		{"bare name", "swipl_path = \"swipl\"\n", "machine_spirit.swipl_path", "must be an absolute path"},
		{"empty path", "swipl_path = \"\"\n", "machine_spirit.swipl_path", "must be an absolute path"},
		{"two-part version", "swipl_version = \"9.0\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
		{"v prefix", "swipl_version = \"v9.0.4\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
		{"suffix", "swipl_version = \"9.0.4-rc1\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
		{"non-ASCII digits", "swipl_version = \"\uff19.0.4\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
		{"trailing newline", "swipl_version = \"9.0.4\\n\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
		{"empty version", "swipl_version = \"\"\n", "machine_spirit.swipl_version", "MAJOR.MINOR.PATCH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Checked whether or not machine_spirit is enabled.
			for _, enabled := range []bool{false, true} {
				src := fmt.Sprintf("[machine_spirit]\nenabled = %t\n%s", enabled, tc.src)
				_, err := parse(t, src)
				if tc.key == "" {
					if err != nil {
						t.Fatalf("should be accepted:\n%v", err)
					}
					continue
				}
				wantOnly(t, err, tc.key, tc.key, tc.want)
			}
		})
	}
}

func TestExecutorNames(t *testing.T) {
	tests := []struct {
		name    string
		section string // the TOML table header's key
		key     string // the problem key; "" if valid
		want    string
	}{
		{"single letter", "a", "", ""},
		{"letters digits dash underscore", "my-exec_2", "", ""},
		{"32 characters", strings.Repeat("a", 32), "", ""},
		{"33 characters", strings.Repeat("a", 33), "executors." + strings.Repeat("a", 33), "1 to 32 characters"},
		{"uppercase", "Mine", "executors.Mine", "invalid executor name"},
		{"leading digit", "1st", "executors.1st", "a lowercase letter first"},
		{"leading dash", `"-x"`, "executors.-x", "invalid executor name"},
		{"dot in a quoted name", `"my.exec"`, `executors."my.exec"`, "invalid executor name"},
		{"space", `"my exec"`, `executors."my exec"`, "invalid executor name"},
		{"empty", `""`, `executors.""`, "invalid executor name"},
		{"built-in legacy", "legacy", "executors.legacy", "built-in executor"},
		{"built-in machinespirit", "machinespirit", "executors.machinespirit", "built-in executor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf("[executors.%s]\npath = \"/opt/plugin\"\n", tc.section)
			cfg, err := parse(t, src)
			if tc.key == "" {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				if len(cfg.Executors) != 1 {
					t.Fatalf("Executors = %v, want one", cfg.Executors)
				}
				return
			}
			p := wantOnly(t, err, tc.key, tc.key, tc.want)
			t.Logf("%s", p.Message)
		})
	}
}

func TestExecutorSHA256(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		name string
		sha  string
		ok   bool
		want string
	}{
		{"lowercase hex", good, true, ""},
		{"uppercase hex", strings.ToUpper(good), false, "write it in lowercase"},
		{"63 characters", good[:63], false, "64 lowercase hexadecimal characters"},
		{"65 characters", good + "0", false, "64 lowercase hexadecimal characters"},
		{"not hex", strings.Repeat("g", 64), false, "64 lowercase hexadecimal characters"},
		{"sha256sum line", good + "  plugin", false, "64 lowercase hexadecimal characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf("[executors.x]\npath = \"/opt/x\"\nsha256 = %q\n", tc.sha)
			cfg, err := parse(t, src)
			if tc.ok {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				if cfg.Executors["x"].SHA256 != tc.sha {
					t.Fatalf("SHA256 = %q", cfg.Executors["x"].SHA256)
				}
				return
			}
			wantOnly(t, err, "executors.x.sha256", "executors.x.sha256", tc.want)
		})
	}
	// Leaving it out means "not pinned".
	cfg := mustParse(t, "[executors.x]\npath = \"/opt/x\"\n")
	if cfg.Executors["x"].SHA256 != "" {
		t.Fatalf("SHA256 = %q, want empty", cfg.Executors["x"].SHA256)
	}
}

func TestExecutorInterpreter(t *testing.T) {
	pin := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		name, body string
		key, want  string // "" when accepted
	}{
		{"pinned both", "sha256 = \"PIN\"\ninterpreter = \"/usr/bin/python3\"\ninterpreter_sha256 = \"PIN\"\n", "", ""},
		{"unpinned", "interpreter = \"/usr/bin/python3\"\n", "", ""},
		{"script pinned alone", "sha256 = \"PIN\"\ninterpreter = \"/usr/bin/python3\"\n", "executors.x.interpreter_sha256", "pin its interpreter too"},
		{"interpreter pinned alone", "interpreter = \"/usr/bin/python3\"\ninterpreter_sha256 = \"PIN\"\n", "executors.x.sha256", "pin the script too"},
		{"pin without interpreter", "sha256 = \"PIN\"\ninterpreter_sha256 = \"PIN\"\n", "executors.x.interpreter_sha256", "executors.x.interpreter is not"},
		{"bad pin", "sha256 = \"PIN\"\ninterpreter = \"/usr/bin/python3\"\ninterpreter_sha256 = \"abc\"\n", "executors.x.interpreter_sha256", "64 lowercase hexadecimal characters"},
		{"4096 bytes", "interpreter = \"/" + strings.Repeat("a", 4095) + "\"\n", "", ""},
		{"4097 bytes", "interpreter = \"/" + strings.Repeat("a", 4096) + "\"\n", "executors.x.interpreter", "4097 bytes long: at most 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "[executors.x]\npath = \"/opt/x.py\"\n" + strings.ReplaceAll(tc.body, "PIN", pin)
			cfg, err := parse(t, src)
			if tc.key != "" {
				wantOnly(t, err, tc.key, tc.key, tc.want)
				return
			}
			if err != nil {
				t.Fatalf("should be accepted:\n%v", err)
			}
			if cfg.Executors["x"].Interpreter == "" {
				t.Fatal("Interpreter is empty")
			}
		})
	}
}

func TestExecutorPath(t *testing.T) {
	tmp := t.TempDir()
	tests := []struct {
		name    string
		baseDir string
		path    string
		want    string // the resolved path; "" if an error is expected
		problem string
	}{
		{"relative", "/etc/taskhost", "plugins/x", "/etc/taskhost/plugins/x", ""},
		{"relative with dot-dot", "/etc/taskhost", "../../opt/x", "/opt/x", ""},
		{"relative to a temp dir", tmp, "x", filepath.Join(tmp, "x"), ""},
		{"absolute", "/etc/taskhost", "/opt/x", "/opt/x", ""},
		{"absolute, cleaned", "/etc/taskhost", "/opt//x/./y", "/opt/x/y", ""},
		{"absolute without base dir", "", "/opt/x", "/opt/x", ""},
		{"relative without base dir", "", "plugins/x", "", "use an absolute path"},
		{"empty", "/etc/taskhost", "", "", "executors.x.path is missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf("[executors.x]\npath = %q\n", tc.path)
			cfg, err := Parse([]byte(src), tc.baseDir)
			if tc.want == "" {
				wantOnly(t, err, "executors.x.path", tc.problem)
				return
			}
			if err != nil {
				t.Fatalf("should be accepted:\n%v", err)
			}
			if got := cfg.Executors["x"].Path; got != tc.want {
				t.Fatalf("Path = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		_, err := parse(t, "[executors.x]\nargs = []\n")
		wantOnly(t, err, "executors.x.path", "executors.x.path is missing")
	})
	t.Run("Validate wants it absolute", func(t *testing.T) {
		cfg := Default()
		cfg.Executors["x"] = Executor{Path: "relative/x"}
		wantOnly(t, cfg.Validate(), "executors.x.path", "must be an absolute path")
	})
}

func TestExecutorArgs(t *testing.T) {
	args := func(n, size int) []string {
		a := make([]string, n)
		for i := range a {
			a[i] = strings.Repeat("a", size)
		}
		return a
	}
	tests := []struct {
		name string
		args []string
		want string // "" if valid
	}{
		{"none", []string{}, ""},
		{"16 arguments", args(16, 1), ""},
		{"17 arguments", args(17, 1), "has 17 arguments: at most 16"},
		{"256 bytes", args(1, 256), ""},
		{"257 bytes", append(args(2, 1), strings.Repeat("a", 257)), "executors.x.args[2] is 257 bytes long: at most 256"},
		{"256 bytes of multi-byte characters", []string{strings.Repeat("é", 128)}, ""},
		{"257 bytes of multi-byte characters", []string{strings.Repeat("é", 128) + "a"}, "is 257 bytes long"},
		{"NUL byte", []string{"a\x00b"}, "executors.x.args[0] contains a NUL byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for i, a := range tc.args {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q", a)
			}
			src := fmt.Sprintf("[executors.x]\npath = \"/opt/x\"\nargs = [%s]\n", strings.ReplaceAll(b.String(), `\x00`, `\u0000`))
			cfg, err := parse(t, src)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				if got := cfg.Executors["x"].Args; !slices.Equal(got, tc.args) {
					t.Fatalf("Args = %q, want %q", got, tc.args)
				}
				return
			}
			wantOnly(t, err, "executors.x.args", tc.want)
		})
	}
}

// padTo returns a valid config of exactly n bytes: a small table padded with
// a comment.
func padTo(t *testing.T, n int) []byte {
	t.Helper()
	head := "[tasks]\nmax_steps = 7\n#"
	if n < len(head)+1 {
		t.Fatalf("padTo(%d): too small", n)
	}
	return []byte(head + strings.Repeat("x", n-len(head)-1) + "\n")
}

func TestFileSizeLimit(t *testing.T) {
	t.Run("Parse at the limit", func(t *testing.T) {
		cfg, err := Parse(padTo(t, MaxFileBytes), "")
		if err != nil {
			t.Fatalf("a %d-byte config should be accepted:\n%v", MaxFileBytes, err)
		}
		if cfg.Tasks.MaxSteps != 7 {
			t.Fatalf("MaxSteps = %d, want 7", cfg.Tasks.MaxSteps)
		}
	})
	t.Run("Parse past the limit", func(t *testing.T) {
		_, err := Parse(padTo(t, MaxFileBytes+1), "")
		p := wantOnly(t, err, "", "larger than the 1048576-byte (1 MiB) limit")
		t.Logf("%s", p.Message)
	})
	dir := t.TempDir()
	t.Run("Load at the limit", func(t *testing.T) {
		path := filepath.Join(dir, "at.toml")
		writeFile(t, path, padTo(t, MaxFileBytes))
		if _, err := Load(path); err != nil {
			t.Fatalf("Load of a %d-byte file failed:\n%v", MaxFileBytes, err)
		}
	})
	t.Run("Load past the limit", func(t *testing.T) {
		path := filepath.Join(dir, "past.toml")
		writeFile(t, path, padTo(t, 3*MaxFileBytes))
		_, err := Load(path)
		cerr := asError(t, err)
		if cerr.Path != path || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "1 MiB") {
			t.Fatalf("want a size error naming %s, got:\n%v", path, err)
		}
	})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	t.Run("resolves executor paths against the file's directory", func(t *testing.T) {
		path := filepath.Join(dir, "ok.toml")
		writeFile(t, path, []byte("[tasks]\nexecutor = \"mine\"\n[executors.mine]\npath = \"plugins/mine\"\nargs = [\"-v\"]\n"))
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		want := Executor{Path: filepath.Join(dir, "plugins", "mine"), Args: []string{"-v"}}
		if got := cfg.Executors["mine"]; !reflect.DeepEqual(got, want) {
			t.Fatalf("executor = %+v, want %+v", got, want)
		}
	})

	t.Run("relative file path", func(t *testing.T) {
		t.Chdir(dir)
		writeFile(t, filepath.Join(dir, "rel.toml"), []byte("[executors.mine]\npath = \"mine\"\n"))
		cfg, err := Load("rel.toml")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.Executors["mine"].Path, filepath.Join(dir, "mine"); got != want {
			t.Fatalf("Path = %q, want %q", got, want)
		}
	})

	t.Run("missing file names the path", func(t *testing.T) {
		path := filepath.Join(dir, "nope", "taskhost.toml")
		_, err := Load(path)
		if err == nil {
			t.Fatal("expected an error")
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("error does not name %s: %v", path, err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("errors.Is(err, fs.ErrNotExist) = false for %v", err)
		}
		t.Logf("%v", err)
	})

	t.Run("directory names the path", func(t *testing.T) {
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("want an error naming %s, got %v", dir, err)
		}
	})

	t.Run("invalid file names the path on every line", func(t *testing.T) {
		path := filepath.Join(dir, "bad.toml")
		writeFile(t, path, []byte("[tasks]\nmax_concurrent = 0\nbogus = 1\n"))
		_, err := Load(path)
		cerr := asError(t, err)
		if cerr.Path != path || len(cerr.Problems) != 2 {
			t.Fatalf("want 2 problems for %s, got Path=%q:\n%v", path, cerr.Path, err)
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, path+": ") {
				t.Fatalf("line %q does not start with the path", line)
			}
		}
	})

	t.Run("syntax error names the path", func(t *testing.T) {
		path := filepath.Join(dir, "syntax.toml")
		writeFile(t, path, []byte("[tasks\n"))
		_, err := Load(path)
		if cerr := asError(t, err); cerr.Path != path || !strings.Contains(err.Error(), path) {
			t.Fatalf("want an error naming %s, got %v", path, err)
		}
	})
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Problems: []Problem{{Key: "a", Message: "first"}, {Key: "b", Message: "second"}}}
	if got, want := e.Error(), "config: first\nconfig: second"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Path = "/etc/t.toml"
	if got, want := e.Error(), "/etc/t.toml: first\n/etc/t.toml: second"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}

	many := &Error{}
	for i := range maxErrorLines + 10 {
		many.Problems = append(many.Problems, Problem{Message: fmt.Sprint(i)})
	}
	lines := strings.Split(many.Error(), "\n")
	if len(lines) != maxErrorLines+1 || !strings.HasSuffix(lines[maxErrorLines], "... and 10 more problems") {
		t.Errorf("Error() of %d problems: %d lines, last %q", len(many.Problems), len(lines), lines[len(lines)-1])
	}

	// errors.As finds it through wrapping.
	var cerr *Error
	if !errors.As(fmt.Errorf("starting: %w", e), &cerr) || cerr != e {
		t.Error("errors.As does not find a wrapped *Error")
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"max_steps", "max_steps_cap", "sha256", "enabled"}
	for in, want := range map[string]string{
		"max_stepz":    "max_steps",
		"MAX_STEPS":    "max_steps",
		"maxsteps":     "max_steps",
		"max_step_cap": "max_steps_cap",
		"sha":          "sha256",
		"enable":       "enabled",
		"colour":       "",
		"x":            "",
	} {
		if got := suggest(in, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeySetCovers(t *testing.T) {
	s := problems{
		{Key: "tasks.max_steps"},
		{Key: `executors."a.b"`},
		{Key: ""}, // whole-file problems cover nothing
	}.keySet()
	for key, want := range map[string]bool{
		"tasks.max_steps":          true,
		"tasks.max_steps.x":        true,
		"tasks.max_steps_cap":      false,
		"tasks":                    false,
		`executors."a.b"`:          true,
		`executors."a.b".path`:     true,
		`executors."a"`:            false,
		"executors.a":              false,
		`executors."a.b\".c".path`: false,
		"limits.goal_chars":        false,
		"":                         false,
	} {
		if got := s.covers(key); got != want {
			t.Errorf("covers(%q) = %t, want %t", key, got, want)
		}
	}
}

func TestSchemaDepth(t *testing.T) {
	// machine_spirit.handler_modules.NAME.path is the deepest key.
	if schemaDepth != 4 {
		t.Fatalf("schemaDepth = %d, want 4", schemaDepth)
	}
}

func TestServiceSections(t *testing.T) {
	cases := []struct {
		name, toml, key string
	}{
		{"literal api key", "[model]\napi_key = \"sk-123\"", "model.api_key"},
		{"env name with a key in it", "[model]\napi_key_env = \"sk-123 abc\"", "model.api_key_env"},
		{"unknown provider", "[model]\nprovider = \"magic\"", "model.provider"},
		{"openai without url", "[model]\nprovider = \"openai\"\nmodel = \"m\"", "model.base_url"},
		{"openai without model", "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"", "model.model"},
		{"unknown tool", "[tools.\"rm.rf\"]\nenabled = true", `tools."rm.rf"`},
		{"bad approval policy", "[tools.\"shell.run\"]\napproval = \"sometimes\"", `tools."shell.run".approval`},
		{"tool timeout past range", "[tools.\"shell.run\"]\ntimeout_seconds = 3601", `tools."shell.run".timeout_seconds`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml), "")
			var cerr *Error
			if !errors.As(err, &cerr) || !slices.ContainsFunc(cerr.Problems, func(p Problem) bool { return p.Key == tc.key }) {
				t.Fatalf("err = %v, want a problem on %s", err, tc.key)
			}
		})
	}
	// A tool section overrides only the keys it names.
	c, err := Parse([]byte("[tools.\"shell.run\"]\ntimeout_seconds = 5"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Tools["shell.run"]; got.TimeoutSeconds != 5 || got.Approval != ApprovalAlways || !got.Enabled {
		t.Fatalf("shell.run = %+v, want the defaults with timeout 5", got)
	}
	c, err = Parse([]byte("[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\napi_key_env = \"OPENAI_API_KEY\""), "")
	if err != nil || c.Model.APIKeyEnv != "OPENAI_API_KEY" {
		t.Fatalf("openai config: %+v %v", c.Model, err)
	}
}

func TestMachineSpiritHandlerModules(t *testing.T) {
	pin := strings.Repeat("a", 64)
	section := func(name, path string) string {
		return fmt.Sprintf("[machine_spirit.handler_modules.%s]\npath = %q\nsha256 = %q\n", name, path, pin)
	}
	modules := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(section(fmt.Sprintf("m%d", i), fmt.Sprintf("/etc/taskhost/m%d.pl", i)))
		}
		return b.String()
	}
	cfg := mustParse(t, section("words", "mods/a.pl")+section("other", "/opt/b.pl"))
	if got := cfg.MachineSpirit.HandlerModules; len(got) != 2 || got["words"].Path != filepath.Join(testBaseDir, "mods/a.pl") || got["other"].Path != "/opt/b.pl" || got["other"].SHA256 != pin {
		t.Fatalf("handler_modules = %+v", got)
	}
	if cfg := mustParse(t, modules(MaxHandlerModules)); len(cfg.MachineSpirit.HandlerModules) != MaxHandlerModules {
		t.Fatalf("%d modules", len(cfg.MachineSpirit.HandlerModules))
	}
	tests := []struct {
		name, src, key, want string
	}{
		{"one over the bound", modules(MaxHandlerModules + 1), "machine_spirit.handler_modules", "has 17 modules, at most 16"},
		{"no pin", "[machine_spirit.handler_modules.a]\npath = \"/a.pl\"\n", "machine_spirit.handler_modules.a.sha256", "must be the file's SHA-256"},
		{"uppercase pin", "[machine_spirit.handler_modules.a]\npath = \"/a.pl\"\nsha256 = \"" + strings.Repeat("A", 64) + "\"\n", "machine_spirit.handler_modules.a.sha256", "64 lowercase hex"},
		{"no path", "[machine_spirit.handler_modules.a]\nsha256 = \"" + pin + "\"\n", "machine_spirit.handler_modules.a.path", "is missing"},
		{"the same file twice", section("a", "/a.pl") + section("b", "/a.pl"), "machine_spirit.handler_modules.b.path", "the same file as machine_spirit.handler_modules.a"},
		{"bad name", section("Big", "/a.pl"), "machine_spirit.handler_modules.Big", "invalid module name"},
		{"unknown key", "[machine_spirit.handler_modules.a]\npath = \"/a.pl\"\nsha256 = \"" + pin + "\"\nsha = 1\n", "machine_spirit.handler_modules.a.sha", "did you mean"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			t.Log(wantOnly(t, err, tc.key, tc.want).Message)
		})
	}
	if _, err := Parse([]byte(section("a", "a.pl")), ""); err == nil || !strings.Contains(err.Error(), "machine_spirit.handler_modules.a.path") {
		t.Fatalf("a relative path without a base dir: %v", err)
	}
}

// TestMachineSpiritGraphPins: operator graphs come as a dir and its pins,
// together; each pin names a graph id and a SHA-256; at most
// MaxOperatorGraphs.
func TestMachineSpiritGraphPins(t *testing.T) {
	pin := strings.Repeat("b", 64)
	pins := func(n int) string {
		var b strings.Builder
		b.WriteString("[machine_spirit]\ngraphs_dir = \"graphs\"\n[machine_spirit.graph_pins]\n")
		for i := range n {
			fmt.Fprintf(&b, "g%d = %q\n", i, pin)
		}
		return b.String()
	}
	cfg := mustParse(t, pins(MaxOperatorGraphs))
	if got := cfg.MachineSpirit; got.GraphsDir != filepath.Join(testBaseDir, "graphs") || len(got.GraphPins) != MaxOperatorGraphs || got.GraphPins["g0"] != pin {
		t.Fatalf("graphs_dir %q, graph_pins %v", got.GraphsDir, got.GraphPins)
	}
	tests := []struct {
		name, src, key, want string
	}{
		{"one over the bound", pins(MaxOperatorGraphs + 1), "machine_spirit.graph_pins", "has 17 graphs, at most 16"},
		{"pins without a dir", "[machine_spirit.graph_pins]\nplan = \"" + pin + "\"\n", "machine_spirit.graphs_dir", "is missing"},
		{"a dir without pins", "[machine_spirit]\ngraphs_dir = \"/g\"\n", "machine_spirit.graph_pins", "none is loaded unpinned"},
		{"bad graph id", "[machine_spirit]\ngraphs_dir = \"/g\"\n[machine_spirit.graph_pins]\nPlan = \"" + pin + "\"\n", "machine_spirit.graph_pins.Plan", "invalid graph id"},
		{"bad pin", "[machine_spirit]\ngraphs_dir = \"/g\"\n[machine_spirit.graph_pins]\nplan = \"" + strings.Repeat("B", 64) + "\"\n", "machine_spirit.graph_pins.plan", "64 lowercase hex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			t.Log(wantOnly(t, err, tc.key, tc.want).Message)
		})
	}
	if _, err := Parse([]byte("[machine_spirit]\ngraphs_dir = \"g\"\n[machine_spirit.graph_pins]\nplan = \""+pin+"\"\n"), ""); err == nil || !strings.Contains(err.Error(), "machine_spirit.graphs_dir") {
		t.Fatalf("a relative dir without a base dir: %v", err)
	}
}
