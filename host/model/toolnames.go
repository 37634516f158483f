package model

import (
	"fmt"
	"unicode/utf8"
)

// MaxWireToolNameBytes is the longest function name OpenAI's documented
// pattern ^[a-zA-Z0-9_-]{1,64}$ admits.
const MaxWireToolNameBytes = 64

// wireToolName maps a tool name into the provider's function-name alphabet:
// letters, digits, '_' and '-' stay, every other rune ('.', '/', a space, a
// non-ASCII letter) becomes one '_'. So "workspace.write" is sent as
// "workspace_write", and a name already in the alphabet is sent unchanged.
//
// The mapping alone is not injective ("a.b" and "a_b" meet); newToolNames
// makes it so per request by refusing the tools that would meet.
func wireToolName(name string) string {
	b := make([]byte, 0, len(name))
	for _, r := range name {
		if wireRune(r) {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

func wireRune(r rune) bool {
	return r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}

// toolNames is one request's mapping between tool names and the names sent
// on the wire, in both directions. It is built from every name the request
// carries (offered tools and the history's tool calls), so a reply naming
// any of them maps back to the name the host knows.
type toolNames struct {
	toWire   map[string]string
	fromWire map[string]string
}

// newToolNames maps names, refusing a name the provider cannot accept and
// two names that would reach the provider as one: the model could then call
// either, and the host could not tell which.
func newToolNames(names []string) (toolNames, error) {
	tn := toolNames{toWire: make(map[string]string, len(names)), fromWire: make(map[string]string, len(names))}
	for _, name := range names {
		if _, seen := tn.toWire[name]; seen {
			continue
		}
		if name == "" {
			return toolNames{}, &Error{Kind: KindRequest, Message: "a tool has an empty name; the provider requires 1 to 64 characters"}
		}
		wire := wireToolName(name)
		if len(wire) > MaxWireToolNameBytes {
			return toolNames{}, &Error{Kind: KindRequest, Message: fmt.Sprintf(
				"tool %q: name is %d characters; the provider accepts at most %d (^[a-zA-Z0-9_-]{1,64}$)",
				excerpt(name, MaxWireToolNameBytes)+"…", utf8.RuneCountInString(name), MaxWireToolNameBytes)}
		}
		if other, clash := tn.fromWire[wire]; clash {
			return toolNames{}, &Error{Kind: KindRequest, Message: fmt.Sprintf(
				"tools %q and %q would both be sent to the provider as %q; rename one of them",
				excerpt(other, MaxWireToolNameBytes), excerpt(name, MaxWireToolNameBytes), wire)}
		}
		tn.toWire[name] = wire
		tn.fromWire[wire] = name
	}
	return tn, nil
}

// wire returns the name to send for name.
func (tn toolNames) wire(name string) string {
	if w, ok := tn.toWire[name]; ok {
		return w
	}
	return wireToolName(name)
}

// host returns the host's name for a name the provider sent. A name that
// maps to no tool of the request is returned as it came, so the host reports
// the unknown tool by the name the model used.
func (tn toolNames) host(wire string) string {
	if n, ok := tn.fromWire[wire]; ok {
		return n
	}
	return wire
}
