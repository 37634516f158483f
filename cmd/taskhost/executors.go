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
	fs.Usage = usageFunc(fs, "taskhost executors [reload] [flags]",
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
	resp, err := apipb.NewHostServiceClient(conn).ListExecutors(cctx, &apipb.ListExecutorsRequest{})
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
		newPrinter(e, true).emit(map[string]any{"executors": views})
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
	return exitOK
}
