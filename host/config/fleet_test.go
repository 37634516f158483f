package config

import (
	"strings"
	"testing"
)

func TestFleetKeys(t *testing.T) {
	long := strings.Repeat("h", 64)
	cases := []struct {
		name, src string
		key       string // "" = accepted
		want      string
	}{
		{"host id at 64 bytes", "[fleet]\nhost_id = \"" + long + "\"", "", ""},
		{"host id past 64 bytes", "[fleet]\nhost_id = \"" + long + "h\"", "fleet.host_id", "65 bytes"},
		{"host id with a space", "[fleet]\nhost_id = \"web 1\"", "fleet.host_id", "byte 3"},
		{"host id with a slash", "[fleet]\nhost_id = \"a/b\"", "fleet.host_id", "only letters"},
		{"lease at twice the heartbeat", "[fleet]\nheartbeat_seconds = 10\nlease_seconds = 20", "fleet.heartbeat_seconds", "between 1 and 9"},
		{"lease just over twice the heartbeat", "[fleet]\nheartbeat_seconds = 10\nlease_seconds = 21", "", ""},
		{"lease out of range names only the lease", "[fleet]\nheartbeat_seconds = 10\nlease_seconds = 4000", "fleet.lease_seconds", "between 3 and 3600"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parse(t, c.src)
			if c.key == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if strings.Contains(c.src, long) && cfg.Fleet.HostID != long {
					t.Fatalf("host_id decoded as %q", cfg.Fleet.HostID)
				}
				return
			}
			wantOnly(t, err, c.key, c.want)
		})
	}
}
