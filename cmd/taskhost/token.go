package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"strings"
)

func tokenCmd(ctx context.Context, e *env, args []string) int {
	subs := []command{{"hash", "print the SHA-256 of the token read from stdin", tokenHashCmd}}
	return subcommand(e, "token", subs, args, func(c command, rest []string) int { return c.run(ctx, e, rest) })
}

func tokenHashCmd(_ context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("token hash", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, `print {"sha256": "..."}`)
	fs.Usage = usageFunc(fs, "taskhost token hash [--json] < TOKEN-FILE",
		"Reads a bearer token from stdin (surrounding white space is ignored) and prints\nits SHA-256, for the daemon's config:\n\n  [api.tokens]\n  NAME = \"<the printed hash>\"\n\nThe token itself never goes in the config. Make one with e.g.\n'head -c 32 /dev/urandom | base64 > token'.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	data, err := io.ReadAll(io.LimitReader(e.stdin, maxTokenFileBytes+1))
	if err != nil {
		errorf(e, "token hash: read stdin: %v", err)
		return exitUsage
	}
	tok := strings.TrimSpace(string(data))
	switch {
	case len(data) > maxTokenFileBytes:
		errorf(e, "token hash: the token is longer than %d bytes", maxTokenFileBytes)
		return exitUsage
	case len(tok) < 16:
		errorf(e, "token hash: the token on stdin is %d bytes: use at least 16 random bytes (e.g. head -c 32 /dev/urandom | base64)", len(tok))
		return exitUsage
	case len(tok) > 512:
		errorf(e, "token hash: the token is %d bytes: the daemon accepts at most 512", len(tok))
		return exitUsage
	}
	sum := sha256.Sum256([]byte(tok))
	h := hex.EncodeToString(sum[:])
	if *jsonOut {
		newPrinter(e, true).emit(map[string]any{"sha256": h})
		return exitOK
	}
	fmt.Fprintln(e.stdout, h)
	return exitOK
}
