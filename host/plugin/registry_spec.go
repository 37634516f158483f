package plugin

// Spec returns how kind is started (its binary, arguments and SHA-256 pin),
// and whether kind was registered with a binary at all (a kind only marked
// unavailable has none).
func (r *Registry) Spec(kind string) (PluginSpec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.specs[kind]
	return s, ok
}
