package datadir

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/uids"
)

// uidPool is the pool of uids untrusted processes run under
// ([confinement] uid_first, uid_count), or nil: when the range is off, or
// when the daemon is not root and so cannot run a process as another uid
// (said at WARN, with what it means and the way out).
func uidPool(c config.Confinement, log hclog.Logger) (*uids.Pool, error) {
	if c.UIDCount == 0 {
		log.Warn("[confinement] uid_count = 0: shell.run commands and plugins run as the daemon's uid, which can reach everything that trusts it (its API socket, its database role)")
		return nil, nil
	}
	if os.Geteuid() != 0 {
		log.Warn("the daemon is not root: shell.run commands and plugins run as its own uid, which can reach everything that trusts it (its API socket, its database role); run it as root to give each command and plugin a uid of its own",
			"uid", os.Geteuid(), "uid_range", uids.Range{First: c.UIDFirst, Count: c.UIDCount}.String())
		return nil, nil
	}
	p, err := uids.NewPool(uids.Range{First: c.UIDFirst, Count: c.UIDCount})
	if err != nil {
		return nil, fmt.Errorf("[confinement] uid range: %w", err)
	}
	return p, nil
}
