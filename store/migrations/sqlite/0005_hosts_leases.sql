-- One row per host of a fleet sharing this store (hosts.go): a host whose
-- heartbeat is older than the lease loses its running tasks.

CREATE TABLE hosts (
			id           TEXT    PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			version      TEXT    NOT NULL DEFAULT '' CHECK (length(version) <= 64),
			started_ns   INTEGER NOT NULL,
			heartbeat_ns INTEGER NOT NULL
		) STRICT;

-- The host holding the task's current run; '' for runs started before
-- fleets existed (or by an unnamed host). The run id is the lease epoch.
ALTER TABLE tasks ADD COLUMN lease_host TEXT NOT NULL DEFAULT '' CHECK (length(lease_host) <= 64);

-- The sweep for lost hosts looks only at live tasks.
CREATE INDEX tasks_lease ON tasks (lease_host) WHERE status IN ('running','waiting_approval');
