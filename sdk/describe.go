package sdk

import (
	"errors"
	"fmt"
)

// validateDescription checks what Serve can check before the handshake, so
// that a misnamed executor fails at start-up with a clear message instead of
// at registration with a vague one.
func validateDescription(d Description) error {
	if d.Kind == "" {
		return errors.New("executor kind is empty")
	}
	for _, r := range d.Kind {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("executor kind %q: only lowercase letters, digits, '-' and '_' are allowed", d.Kind)
		}
	}
	if d.Version == "" {
		return fmt.Errorf("executor %q: version is empty", d.Kind)
	}
	return nil
}
