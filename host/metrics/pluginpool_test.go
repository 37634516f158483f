package metrics

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/taskhost/taskhost/store"
)

// poolSource is a store with executor pools whose counts the test sets.
type poolSource struct {
	*store.Store
	mu    sync.Mutex
	pools []PluginPool
}

func (p *poolSource) PluginPools() []PluginPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PluginPool(nil), p.pools...)
}

// A source with plugin pools exports each executor's size, idle count,
// launches by source and discards by reason, as the pool counted them at
// the scrape; a source without pools exports none of those families.
func TestPluginPoolSeries(t *testing.T) {
	src := &poolSource{Store: openStore(t), pools: []PluginPool{
		{Executor: "legacy", Size: 2, Idle: 1, Served: 7, Cold: 3, Started: 9, Stale: 1, DiedIdle: 0},
	}}
	m, err := New(Options{Source: src, Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	_, body := scrape(t, m.Handler(), http.MethodGet, "/metrics")
	got := parse(t, body)
	for series, want := range map[string]float64{
		`taskhost_plugin_pool_size{executor="legacy"}`:                               2,
		`taskhost_plugin_pool_idle{executor="legacy"}`:                               1,
		`taskhost_plugin_pool_launches_total{executor="legacy",source="pooled"}`:     7,
		`taskhost_plugin_pool_launches_total{executor="legacy",source="cold"}`:       3,
		`taskhost_plugin_pool_started_total{executor="legacy"}`:                      9,
		`taskhost_plugin_pool_discarded_total{executor="legacy",reason="stale"}`:     1,
		`taskhost_plugin_pool_discarded_total{executor="legacy",reason="died_idle"}`: 0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}

	// The next scrape reads the pools again.
	src.mu.Lock()
	src.pools[0].Idle, src.pools[0].Served = 2, 8
	src.pools = append(src.pools, PluginPool{Executor: "machinespirit", Size: 1})
	src.mu.Unlock()
	_, body = scrape(t, m.Handler(), http.MethodGet, "/metrics")
	got = parse(t, body)
	if got[`taskhost_plugin_pool_idle{executor="legacy"}`] != 2 || got[`taskhost_plugin_pool_launches_total{executor="legacy",source="pooled"}`] != 8 {
		t.Errorf("second scrape: idle %v served %v, want 2 and 8", got[`taskhost_plugin_pool_idle{executor="legacy"}`],
			got[`taskhost_plugin_pool_launches_total{executor="legacy",source="pooled"}`])
	}
	if got[`taskhost_plugin_pool_size{executor="machinespirit"}`] != 1 {
		t.Errorf("a pool added since the first scrape is missing: %v", got[`taskhost_plugin_pool_size{executor="machinespirit"}`])
	}

	plain, err := New(Options{Source: openStore(t), Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if _, body := scrape(t, plain.Handler(), http.MethodGet, "/metrics"); strings.Contains(body, "taskhost_plugin_pool_") {
		t.Errorf("a source without pools exports pool series")
	}
}
