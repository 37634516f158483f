package config

import "testing"

// TestMetricsListen accepts loopback addresses only, like tcp_listen: the
// metrics listener has no authentication.
func TestMetricsListen(t *testing.T) {
	if got := mustParse(t, "").API.MetricsListen; got != "" {
		t.Errorf("default metrics_listen = %q, want off", got)
	}
	for _, ok := range []string{"127.0.0.1:9464", "[::1]:0", "127.0.0.2:65535"} {
		if got := mustParse(t, "[api]\nmetrics_listen = \""+ok+"\"\n").API.MetricsListen; got != ok {
			t.Errorf("metrics_listen = %q, want %q", got, ok)
		}
	}
	cases := []struct{ addr, want string }{
		{"0.0.0.0:9464", "not a loopback address"},
		{"192.168.1.2:9464", "not a loopback address"},
		{"[::]:9464", "not a loopback address"},
		{"localhost:9464", "not an IP address"},
		{"127.0.0.1", "IP:PORT"},
		{"127.0.0.1:65536", "port"},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			_, err := parse(t, "[api]\nmetrics_listen = \""+c.addr+"\"\n")
			wantProblem(t, err, "api.metrics_listen", c.want, c.addr)
		})
	}
}
