// Package datadir opens a taskhost data dir and what the engine runs on:
// the layout and its checks (datadir.go), the lock, the host key
// (key.go), the store (storeopen.go), the plugin trampoline
// (trampoline.go), the uid pool (uidpool.go), the executors' specs from
// the config and the executor dir (executors.go, pluginspec.go), the
// registry, the model provider and the tools (open.go), and the data dir's
// backup and restore (backup.go).
//
// It knows nothing of tasks. Package host puts the engine on a Dir
// (host.Open): it recovers the runs a previous host left, then asks the
// Dir to register the executors, so that no plugin starts before recovery.
//
// Guarantees:
//
//   - Nothing is written to a data dir that fails its checks: a symlink,
//     another user's entry or one open to others is refused before the
//     lock file is made (checkDataDir), and the key and lock are checked
//     again on the descriptors they are read through.
//   - One Dir per data dir: the lock is an flock, released (LOCK_UN) before
//     its descriptor is closed, so a child forked meanwhile cannot keep it.
//   - An executor that fails its checks is unavailable, not fatal; one
//     whose kind the config disables is refused with the reason.
//   - Close closes, in order, the tools (killing what a command left),
//     the registry's plugins, the trampoline, the store and the lock.
package datadir
