package metrics

import "github.com/prometheus/client_golang/prometheus"

// PluginPool is what one executor kind's pool of pre-started plugin
// processes holds and has done, since the daemon started.
type PluginPool struct {
	Executor string
	Size     int // the processes it keeps ready ([executors.NAME] prestart)
	Idle     int // ready now
	// Served counts launches a pooled process served; Cold, launches that
	// started a process of their own while the pool was on.
	Served, Cold uint64
	// Started counts pooled processes started; Stale, those stopped unused
	// (their binary or verdict changed, or the host closed); DiedIdle,
	// those that exited while they waited.
	Started, Stale, DiedIdle uint64
}

// PluginPoolSource is a Source whose executors' plugin pools are exported
// too; `taskhost serve`'s source reads them from the plugin registry.
type PluginPoolSource interface {
	PluginPools() []PluginPool
}

// poolCollector reads the plugin pools once per scrape. They are in memory:
// no store read, so they are there when the store is not.
type poolCollector struct {
	src                                  PluginPoolSource
	size, idle, launches, started, ended *prometheus.Desc
}

func newPoolCollector(src PluginPoolSource) *poolCollector {
	d := prometheus.NewDesc
	ex := []string{"executor"}
	return &poolCollector{
		src:  src,
		size: d("taskhost_plugin_pool_size", "Plugin processes the executor's pool keeps ready (prestart).", ex, nil),
		idle: d("taskhost_plugin_pool_idle", "Plugin processes ready in the executor's pool now.", ex, nil),
		launches: d("taskhost_plugin_pool_launches_total",
			"Plugin launches since the daemon started while the executor's pool was on, by source (pooled: a ready process served it; cold: it started its own).",
			[]string{"executor", "source"}, nil),
		started: d("taskhost_plugin_pool_started_total", "Pooled plugin processes started since the daemon started.", ex, nil),
		ended: d("taskhost_plugin_pool_discarded_total",
			"Pooled plugin processes that never served, by reason (stale: stopped because their binary or verdict changed or the host closed; died_idle: exited while they waited).",
			[]string{"executor", "reason"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.size, c.idle, c.launches, c.started, c.ended} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.src.PluginPools() {
		metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, t, v, append([]string{p.Executor}, labels...)...)
		}
		metric(c.size, prometheus.GaugeValue, float64(p.Size))
		metric(c.idle, prometheus.GaugeValue, float64(p.Idle))
		metric(c.launches, prometheus.CounterValue, float64(p.Served), "pooled")
		metric(c.launches, prometheus.CounterValue, float64(p.Cold), "cold")
		metric(c.started, prometheus.CounterValue, float64(p.Started))
		metric(c.ended, prometheus.CounterValue, float64(p.Stale), "stale")
		metric(c.ended, prometheus.CounterValue, float64(p.DiedIdle), "died_idle")
	}
}
