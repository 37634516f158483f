package config

// Store drivers.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// Store is the [store] section: which engine holds the tasks. SQLite (the
// default) is a file in the data dir and needs nothing else; PostgreSQL is
// one database that several hosts may share.
type Store struct {
	Driver string `toml:"driver"` // "sqlite" (default) or "postgres"
	// DSNEnv names the environment variable the daemon reads the
	// PostgreSQL DSN from when it opens the store: the DSN (which may hold
	// a password) never goes in this file. Required with driver =
	// "postgres", refused with "sqlite".
	DSNEnv string `toml:"dsn_env"`
	// The PostgreSQL connection pool; ignored by SQLite, whose pool is fixed.
	MaxOpenConns           int `toml:"max_open_conns"`            // 2..1000, default 16
	MaxIdleConns           int `toml:"max_idle_conns"`            // 0..max_open_conns, default 4
	ConnMaxLifetimeSeconds int `toml:"conn_max_lifetime_seconds"` // 1..86400, default 1800
}

// Bounds of the [store] pool keys.
const (
	minStoreOpenConns, maxStoreOpenConns = 2, 1000
	minConnLifetime, maxConnLifetime     = 1, 86400
)

func defaultStore() Store {
	return Store{Driver: StoreSQLite, MaxOpenConns: 16, MaxIdleConns: 16, ConnMaxLifetimeSeconds: 1800}
}

func (s Store) validate(ps *problems) {
	switch s.Driver {
	case StoreSQLite:
		if s.DSNEnv != "" {
			ps.add("store.dsn_env", "store.dsn_env = %s: only the postgres driver reads a DSN; remove it, or set store.driver = \"postgres\"", quote(s.DSNEnv))
		}
	case StorePostgres:
		switch {
		case s.DSNEnv == "":
			ps.add("store.dsn_env", "store.dsn_env is required with store.driver = \"postgres\": the name of the environment variable that holds the DSN")
		case !envNameRE.MatchString(s.DSNEnv):
			ps.add("store.dsn_env", "store.dsn_env = %s: not an environment variable name (letters, digits and '_', not a digit first, at most 128)", quote(s.DSNEnv))
		}
	default:
		ps.add("store.driver", "store.driver = %s: must be \"sqlite\" or \"postgres\"", quote(s.Driver))
	}
	ps.intRange("store.max_open_conns", s.MaxOpenConns, minStoreOpenConns, maxStoreOpenConns)
	if s.MaxOpenConns >= minStoreOpenConns && s.MaxOpenConns <= maxStoreOpenConns && (s.MaxIdleConns < 0 || s.MaxIdleConns > s.MaxOpenConns) {
		ps.add("store.max_idle_conns", "store.max_idle_conns = %d: must be between 0 and %d (the value of store.max_open_conns)", s.MaxIdleConns, s.MaxOpenConns)
	} else {
		ps.intRange("store.max_idle_conns", s.MaxIdleConns, 0, maxStoreOpenConns)
	}
	ps.intRange("store.conn_max_lifetime_seconds", s.ConnMaxLifetimeSeconds, minConnLifetime, maxConnLifetime)
}
