-- SQLite's v5: the fleet's hosts and each run's lease (hosts.go).

CREATE TABLE hosts (
			id           TEXT   PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			version      TEXT   NOT NULL DEFAULT '' CHECK (length(version) <= 64),
			started_ns   BIGINT NOT NULL,
			heartbeat_ns BIGINT NOT NULL
		);

ALTER TABLE tasks ADD COLUMN lease_host TEXT NOT NULL DEFAULT '' CHECK (length(lease_host) <= 64);

CREATE INDEX tasks_lease ON tasks (lease_host) WHERE status IN ('running','waiting_approval');
