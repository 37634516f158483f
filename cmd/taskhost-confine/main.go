// Command taskhost-confine is the plugins' trampoline: the host starts
// every executor plugin and every shell.run command through it, and the
// machinespirit plugin starts its Prolog worker through it. It applies the
// confinement policy it is given (internal/confine: rlimits, credentials,
// Landlock, seccomp) to its own thread and execs the target, which
// inherits it.
//
// It exists only to start fast: the taskhost binary can serve as the
// trampoline too (its main calls confine.Main first), but initialising
// the whole daemon's packages costs about 10 ms per start, this binary's
// about 2 ms. The host uses taskhost-confine when it lies in the executor
// directory (beside taskhost, as `make build` puts it) and is trusted;
// otherwise it uses itself.
//
// Run any other way it prints why and exits 2.
package main

import (
	"fmt"
	"os"

	"github.com/taskhost/taskhost/internal/confine"
)

func main() {
	// In the trampoline role this never returns: it execs the target, or
	// exits confine.ExitCode saying what failed.
	confine.Main()
	fmt.Fprintln(os.Stderr, "taskhost-confine: the plugins' trampoline; the taskhost host starts it, it is not run by hand")
	os.Exit(2)
}
