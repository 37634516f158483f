package main

import (
	"errors"
	"flag"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// hostFlags are the flags every command that opens a data dir takes.
type hostFlags struct {
	dataDir    string
	configPath string
	logLevel   string
}

func (h *hostFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.dataDir, "data-dir", defaultDataDir(), "data directory (store, host key, plugin sockets); env TASKHOST_DATA_DIR")
	fs.StringVar(&h.configPath, "config", "", "TOML config file (default: built-in defaults)")
	fs.StringVar(&h.logLevel, "log-level", "warn", "host log level on stderr: trace, debug, info, warn, error, off")
}

func (h *hostFlags) loadConfig() (config.Config, error) {
	if h.configPath == "" {
		return config.Default(), nil
	}
	return config.Load(h.configPath)
}

func (h *hostFlags) logger(e *env) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "taskhost", Output: e.stderr, Level: hclog.LevelFromString(h.logLevel)})
}

func defaultDataDir() string {
	if d := os.Getenv("TASKHOST_DATA_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "taskhost")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "taskhost")
	}
	return "taskhost-data"
}

// localPrincipal is the principal of the user running a foreground host.
func localPrincipal() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid-" + strconv.Itoa(os.Getuid())
}

// exitCodeFor maps an error to the documented exit codes.
func exitCodeFor(err error) int {
	var fe *plugin.FieldError
	var ce *config.Error
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage), errors.As(err, &fe), errors.As(err, &ce):
		return exitUsage
	case errors.Is(err, store.ErrNotFound):
		return exitNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, host.ErrBusy), errors.Is(err, store.ErrQueueFull):
		return exitConflict
	default:
		return exitUnavailable
	}
}
