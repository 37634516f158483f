package config

import (
	"strings"
	"testing"
)

func TestStoreSection(t *testing.T) {
	name128 := "D" + strings.Repeat("S", 127)
	tests := []struct {
		name string
		src  string
		key  string   // "" when the section is accepted
		want []string // in the problem about key
	}{
		{name: "default", src: "", key: ""},
		{name: "postgres with dsn_env", src: "[store]\ndriver = \"postgres\"\ndsn_env = \"TASKHOST_DSN\"\n"},
		{name: "dsn_env at its 128-byte limit", src: "[store]\ndriver = \"postgres\"\ndsn_env = \"" + name128 + "\"\n"},
		{name: "dsn_env past its limit", src: "[store]\ndriver = \"postgres\"\ndsn_env = \"" + name128 + "X\"\n",
			key: "store.dsn_env", want: []string{"not an environment variable name", "at most 128"}},
		{name: "postgres without dsn_env", src: "[store]\ndriver = \"postgres\"\n",
			key: "store.dsn_env", want: []string{"required", "environment variable"}},
		{name: "a DSN where the name goes", src: "[store]\ndriver = \"postgres\"\ndsn_env = \"postgres://u:pw@h/db\"\n",
			key: "store.dsn_env", want: []string{"not an environment variable name"}},
		{name: "dsn_env with sqlite", src: "[store]\ndsn_env = \"TASKHOST_DSN\"\n",
			key: "store.dsn_env", want: []string{"only the postgres driver"}},
		{name: "unknown driver", src: "[store]\ndriver = \"mysql\"\n",
			key: "store.driver", want: []string{`"mysql"`, `"sqlite" or "postgres"`}},
		{name: "idle past open", src: "[store]\nmax_open_conns = 4\nmax_idle_conns = 5\n",
			key: "store.max_idle_conns", want: []string{"between 0 and 4", "store.max_open_conns"}},
		{name: "idle at open", src: "[store]\nmax_open_conns = 4\nmax_idle_conns = 4\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.src)
			if tc.key == "" {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				if cfg.Store.Driver == "" {
					t.Fatalf("Store.Driver is empty, want a driver")
				}
				return
			}
			p := wantOnly(t, err, tc.key, tc.want...)
			t.Logf("%s", p.Message)
		})
	}
}
