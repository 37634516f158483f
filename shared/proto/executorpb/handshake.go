// Package executorpb holds the generated executor protocol and the few
// constants both ends of a go-plugin connection must agree on.
package executorpb

// Handshake values shared by the host and every executor plugin. A process
// started without the cookie is not a plugin launched by taskhost and exits.
const (
	MagicCookieKey   = "TASKHOST_EXECUTOR_PLUGIN"
	MagicCookieValue = "7f3c1b0e-taskhost-executor"

	// ProtocolVersion is the handshake line's second field and what
	// Describe reports; a host and a plugin of different versions refuse
	// each other at the handshake.
	ProtocolVersion = 2

	// PluginName is the key of the executor in go-plugin's plugin set.
	PluginName = "executor"
)
