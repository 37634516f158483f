package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

func executorsCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("executors", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = usageFunc(fs, "taskhost executors [flags]",
		"Lists the daemon's executors: version, whether the binary is pinned by SHA-256,\nthe preflight result (why one that cannot run is unavailable) and how its\nplugin processes are confined.")
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
			pre = "unavailable (" + v.Preflight.Check + "): " + truncateLine(v.Preflight.Detail, 80)
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
