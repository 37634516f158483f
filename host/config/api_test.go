package config

import (
	"strings"
	"testing"
)

const testHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestAPIAndPrincipals(t *testing.T) {
	cfg := mustParse(t, `
[principals]
"0" = "root"
1000 = "alice"

[api]
socket_group = "taskhost"
tcp_listen = "127.0.0.1:7468"

[api.tokens]
ci = "`+testHash+`"
`)
	if cfg.Principals["0"] != "root" || cfg.Principals["1000"] != "alice" {
		t.Errorf("principals = %v", cfg.Principals)
	}
	if cfg.API.SocketGroup != "taskhost" || cfg.API.TCPListen != "127.0.0.1:7468" || cfg.API.Tokens["ci"] != testHash {
		t.Errorf("api = %+v", cfg.API)
	}
	for _, ok := range []string{"[::1]:0", "127.0.0.2:1", "127.0.0.1:65535"} {
		mustParse(t, "[api]\ntcp_listen = \""+ok+"\"\n")
	}
	mustParse(t, "[api]\nsocket_group = \"1234\"\n")
	if cfg := mustParse(t, "[api]\nadmins = ["+strings.Repeat("\"a\",", 99)+"\"root\"]\n"); len(cfg.API.Admins) != 100 || cfg.API.Admins[99] != "root" {
		t.Errorf("100 admins: %v", cfg.API.Admins)
	}
}

func TestAPIProblems(t *testing.T) {
	cases := []struct {
		name, src, key string
		want           []string
	}{
		{"non-loopback listener", "[api]\ntcp_listen = \"0.0.0.0:7468\"", "api.tcp_listen", []string{"not a loopback address"}},
		{"public listener", "[api]\ntcp_listen = \"192.168.1.2:7468\"", "api.tcp_listen", []string{"loopback"}},
		{"host name", "[api]\ntcp_listen = \"localhost:7468\"", "api.tcp_listen", []string{"not an IP address"}},
		{"no port", "[api]\ntcp_listen = \"127.0.0.1\"", "api.tcp_listen", []string{"IP:PORT"}},
		{"bad port", "[api]\ntcp_listen = \"127.0.0.1:http\"", "api.tcp_listen", []string{"port"}},
		{"plain token", "[api]\ntcp_listen = \"127.0.0.1:1\"\n[api.tokens]\nci = \"secret\"", "api.tokens.ci", []string{"SHA-256", "never the token itself"}},
		{"upper-case hash", "[api]\ntcp_listen = \"127.0.0.1:1\"\n[api.tokens]\nci = \"" + strings.ToUpper(testHash) + "\"", "api.tokens.ci", []string{"lowercase"}},
		{"bad token name", "[api]\ntcp_listen = \"127.0.0.1:1\"\n[api.tokens]\n\"a b\" = \"" + testHash + "\"", `api.tokens."a b"`, []string{"invalid principal name"}},
		{"tokens without listener", "[api.tokens]\nci = \"" + testHash + "\"", "api.tokens", []string{"tcp_listen is empty"}},
		{"bad group", "[api]\nsocket_group = \"a b\"", "api.socket_group", []string{"group name"}},
		{"uid not numeric", "[principals]\nalice = \"alice\"", "principals.alice", []string{"numeric uid"}},
		{"uid with sign", "[principals]\n\"+1\" = \"alice\"", `principals."+1"`, []string{"numeric uid"}},
		{"bad principal name", "[principals]\n\"1000\" = \"\"", "principals.1000", []string{"invalid principal name"}},
		{"principal not a string", "[principals]\n\"1000\" = 5", "principals.1000", []string{"expected string"}},
		{"unknown api key", "[api]\nlisten = \"x\"", "api.listen", []string{"unknown key"}},
		{"bad admin name", "[api]\nadmins = [\"alice\", \"a b\"]", "api.admins", []string{"api.admins[1]", "invalid principal name"}},
		{"101 admins", "[api]\nadmins = [" + strings.Repeat("\"a\",", 100) + "\"a\"]", "api.admins", []string{"101 entries: at most 100"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.src)
			wantProblem(t, err, tc.key, tc.want...)
		})
	}
}

func TestDuplicateTokenHash(t *testing.T) {
	_, err := parse(t, "[api]\ntcp_listen = \"127.0.0.1:1\"\n[api.tokens]\na = \""+testHash+"\"\nb = \""+testHash+"\"")
	wantProblem(t, err, "api.tokens.b", "same token hash")
}

func TestCheckLoopback(t *testing.T) {
	if err := CheckLoopback("127.0.0.1:43210"); err != nil {
		t.Error(err)
	}
	if err := CheckLoopback("10.0.0.1:43210"); err == nil {
		t.Error("10.0.0.1 accepted")
	}
}
