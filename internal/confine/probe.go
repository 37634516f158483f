package confine

import (
	"fmt"
	"strings"
)

// Support is what this kernel offers, probed by the caller (once).
type Support struct {
	LandlockABI int    // 0 without Landlock
	Seccomp     bool   // seccomp filters
	CgroupV2    string // a writable cgroup2 mount, or ""
}

// Probe asks the kernel what it offers.
func Probe() Support {
	return Support{LandlockABI: landlockABI(), Seccomp: seccompSupported(), CgroupV2: cgroup2Mount()}
}

// String is e.g. "landlock abi 7, seccomp, cgroup2" or "none (no Landlock)".
func (s Support) String() string {
	if s.LandlockABI < 1 {
		return "none (no Landlock)"
	}
	parts := []string{fmt.Sprintf("landlock abi %d", s.LandlockABI)}
	if s.Seccomp {
		parts = append(parts, "seccomp")
	}
	if s.CgroupV2 != "" {
		parts = append(parts, "cgroup2")
	}
	return strings.Join(parts, ", ")
}

// Summary says what p applies on a kernel offering s, e.g.
// "landlock abi 7, no_new_privs, seccomp, rlimits", or
// "none (no Landlock)" when Landlock was asked for and is missing.
func (p Policy) Summary(s Support) string {
	var parts []string
	switch {
	case p.Landlock != LandlockOff && s.LandlockABI >= 1:
		parts = append(parts, fmt.Sprintf("landlock abi %d", s.LandlockABI))
	case p.Landlock != LandlockOff:
		return "none (no Landlock)"
	}
	parts = append(parts, "no_new_privs")
	if p.DropCaps {
		parts = append(parts, "no capabilities")
	}
	if p.Seccomp.any() && s.Seccomp {
		parts = append(parts, "seccomp")
	}
	if p.Rlimits != (Rlimits{}) {
		parts = append(parts, "rlimits")
	}
	if p.UID > 0 {
		parts = append(parts, fmt.Sprintf("uid %d", p.UID))
	}
	switch {
	case p.NewNetNS:
		parts = append(parts, "no network (loopback only)")
	case p.Seccomp.DenyNetwork && s.Seccomp:
		parts = append(parts, "no network")
	}
	return strings.Join(parts, ", ")
}
