package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

func executorsCmd(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 && args[0] == "reload" {
		return executorsReloadCmd(ctx, e, args[1:])
	}
	fs := flag.NewFlagSet("executors", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	modelPreflight := fs.Bool("model-preflight", false, "run the model preflight ([model] preflight) now and show its result")
	fs.Usage = usageFunc(fs, "taskhost executors [reload] [--model-preflight] [flags]",
		"Lists the daemon's executors: version, whether the binary is pinned by SHA-256,\nthe preflight result against the binary on disk now (ok, pin mismatch, missing,\nhandshake failed, disabled: why one that cannot run is unavailable) and how its\nplugin processes are confined. 'taskhost executors reload' makes the daemon\nre-read its config file's executor settings (as SIGHUP does).")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := apipb.NewHostServiceClient(conn).ListExecutors(cctx, &apipb.ListExecutorsRequest{ModelPreflight: *modelPreflight})
	if err != nil {
		return cf.fail(e, err)
	}
	return printExecutors(e, cf, resp)
}

// reloadTimeout bounds a reload: every executor is started once.
const reloadTimeout = 2 * time.Minute

func executorsReloadCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("executors reload", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = usageFunc(fs, "taskhost executors reload [flags]",
		"Makes the daemon re-read its config file and apply the executor settings\n([executors.NAME] paths, arguments, sha256 pins, confinement; [machine_spirit]\nenabled): each executor is checked again, running tasks keep their plugin.\nOther settings need a restart. For an admin principal or the daemon's own user\n(exit 7 otherwise); a config that does not load changes nothing (exit 2).\nPrints the executors as after the reload.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	resp, err := apipb.NewHostServiceClient(conn).ReloadExecutors(cctx, &apipb.ReloadExecutorsRequest{})
	if err != nil {
		return cf.fail(e, err)
	}
	return printExecutors(e, cf, resp)
}

// liveState names a failed preflight check as an operator reads it.
func liveState(check string) string {
	switch check {
	case "checksum":
		return "pin mismatch"
	case "binary":
		return "missing or not executable"
	case "handshake", "start_timeout":
		return "handshake failed"
	case "disabled":
		return "disabled"
	default:
		return "unavailable (" + check + ")"
	}
}

func printExecutors(e *env, cf clientFlags, resp *apipb.ListExecutorsResponse) int {
	if cf.json {
		views := make([]executorView, 0, len(resp.Executors))
		for _, x := range resp.Executors {
			views = append(views, executorJSON(x))
		}
		out := map[string]any{"executors": views}
		if resp.Model != nil {
			out["model"] = modelJSON(resp.Model)
		}
		newPrinter(e, true).emit(out)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tVERSION\tPIN\tPREFLIGHT\tCONFINEMENT\tRUNTIME")
	for _, x := range resp.Executors {
		v := executorJSON(x)
		kind := v.Kind
		if v.Default {
			kind += " (default)"
		}
		pin := "not pinned"
		if v.Pinned {
			pin = "sha256:" + v.SHA256[:12]
		}
		pre := "ok"
		if !v.Preflight.OK {
			pre = liveState(v.Preflight.Check) + ": " + truncateLine(v.Preflight.Detail, 80)
		}
		var rt []string
		for _, k := range slices.Sorted(maps.Keys(v.Runtime)) {
			rt = append(rt, k+"="+v.Runtime[k])
		}
		version := v.Version
		if version == "" {
			version = "-"
		}
		confinement := v.Confinement
		if confinement == "" {
			confinement = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", kind, version, pin, pre, confinement, strings.Join(rt, " "))
	}
	tw.Flush()
	if resp.Model != nil {
		fmt.Fprintln(e.stdout, modelLine(modelJSON(resp.Model)))
	}
	return exitOK
}

// modelView is the JSON of the model provider's preflight.
type modelView struct {
	Provider  string     `json:"provider"`
	Name      string     `json:"name,omitempty"`
	Preflight bool       `json:"preflight"`
	Checked   *time.Time `json:"checked_at,omitempty"`
	OK        bool       `json:"ok"`
	Kind      string     `json:"kind,omitempty"`
	Message   string     `json:"message,omitempty"`
}

func modelJSON(m *apipb.ModelStatus) modelView {
	v := modelView{Provider: m.Provider, Name: m.Name, Preflight: m.Preflight, OK: m.Ok, Kind: m.Kind, Message: m.Message}
	if m.CheckedUnixNano > 0 {
		at := time.Unix(0, m.CheckedUnixNano).UTC()
		v.Checked = &at
	}
	return v
}

// modelLine is the model provider in one line: which, and what its last
// preflight said.
func modelLine(v modelView) string {
	name := v.Provider
	if v.Name != "" {
		name += " " + v.Name
	}
	switch {
	case !v.Preflight:
		return "model: " + name + ": preflight off ([model] preflight = true to check the endpoint at start)"
	case v.Checked == nil:
		return "model: " + name + ": preflight running"
	case v.OK:
		return "model: " + name + ": preflight ok (" + v.Checked.Local().Format(time.DateTime) + ")"
	}
	return "model: " + name + ": preflight failed (" + v.Kind + "): " + truncateLine(v.Message, 160) + " (" + v.Checked.Local().Format(time.DateTime) + ")"
}
