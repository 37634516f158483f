package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestExecutorConfinementKeys(t *testing.T) {
	section := func(lines ...string) string {
		return "[executors.x]\npath = \"/opt/x\"\n" + strings.Join(lines, "\n") + "\n"
	}
	tests := []struct {
		name string
		toml string
		key  string // "" = valid
	}{
		{"absent is the default", section(), ""},
		{"address space at its bounds", section("max_address_space_mb = 64", "max_open_files = 65536", "max_processes = 16"), ""},
		{"address space past max", section("max_address_space_mb = 1048577"), "executors.x.max_address_space_mb"},
		{"open files below min", section("max_open_files = 63"), "executors.x.max_open_files"},
		{"processes past max", section("max_processes = 65537"), "executors.x.max_processes"},
		{"negative processes", section("max_processes = -1"), "executors.x.max_processes"},
		{"user", section(`user = "nobody"`), ""},
		{"user root", section(`user = "root"`), "executors.x.user"},
		{"user not a name", section(`user = "../x"`), "executors.x.user"},
		{"user at 32 bytes", section(fmt.Sprintf("user = %q", strings.Repeat("u", 32))), ""},
		{"user past 32 bytes", section(fmt.Sprintf("user = %q", strings.Repeat("u", 33))), "executors.x.user"},
		{"read_write 8 paths", section(`read_write = ["/a","/b","/c","/d","/e","/f","/g","/h"]`), ""},
		{"read_write 9 paths", section(`read_write = ["/a","/b","/c","/d","/e","/f","/g","/h","/i"]`), "executors.x.read_write"},
		{"read_write relative (resolved against the config file)", section(`read_write = ["data"]`), ""},
		{"prestart off", section("prestart = 0"), ""},
		{"prestart at its bound", section("prestart = 16"), ""},
		{"prestart past its bound", section("prestart = 17"), "executors.x.prestart"},
		{"prestart negative", section("prestart = -1"), "executors.x.prestart"},
		{"machinespirit prestart at its bound", "[machine_spirit]\nprestart = 16\n", ""},
		{"machinespirit prestart past its bound", "[machine_spirit]\nprestart = 17\n", "machine_spirit.prestart"},
		{"read_only 8 paths", section(`read_only = ["/a","/b","/c","/d","/e","/f","/g","/h"]`), ""},
		{"read_only 9 paths", section(`read_only = ["/a","/b","/c","/d","/e","/f","/g","/h","/i"]`), "executors.x.read_only"},
		{"read_only with a NUL", section(`read_only = ["/a\u0000b"]`), "executors.x.read_only"},
		{"read_only path past 4096 bytes", section(fmt.Sprintf("read_only = [%q]", "/"+strings.Repeat("p", 4096))), "executors.x.read_only"},
		{"read_only relative (resolved against the config file)", section(`read_only = ["lib"]`), ""},
		{"confinement required", "[confinement]\nrequired = true\n", ""},
		{"confinement string", "[confinement]\nrequired = \"yes\"\n", "confinement.required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml), "/")
			if tt.key == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want a config error on %s, got %v", tt.key, err)
			}
			for _, p := range ce.Problems {
				if p.Key == tt.key && strings.Contains(p.Message, tt.key) {
					return
				}
			}
			t.Fatalf("no problem on %s naming it: %v", tt.key, err)
		})
	}
}

// Confinement fails closed by default: on a kernel without Landlock no
// plugin or command runs less confined unless the operator says so.
func TestConfinementRequiredByDefault(t *testing.T) {
	if !Default().Confinement.Required {
		t.Fatal("[confinement] required defaults to false")
	}
}
