-- toposched store, schema version 1.
--
-- `events` is the source of truth: every event SchedulerCore stepped, in
-- order, with the commands it produced (body = {"event": ..., "commands":
-- [...]}, common/include/topo/common/event_json.hpp). Replaying it through a
-- fresh core rebuilds the core exactly. The other tables are materialized
-- from the same entries in the same transaction, for queries; they never feed
-- back into the core.
--
-- Migrations are applied in order inside one transaction; never edit a file
-- that has shipped: add NNNN_what.sql instead (docs/store.md).

CREATE TABLE events (
  seq     INTEGER PRIMARY KEY,  -- 1, 2, ... in the order the core saw them
  time_ms INTEGER NOT NULL,     -- the `now` the event was stepped at
  actor   TEXT    NOT NULL,     -- who caused it: "user:ada", "agent:n0", "scheduler"
  kind    TEXT    NOT NULL,     -- the event's "type" (job_submitted, tick, ...)
  body    TEXT    NOT NULL      -- JSON, see above
) STRICT;
CREATE INDEX events_time ON events(time_ms);

CREATE TABLE jobs (
  id                     INTEGER PRIMARY KEY,
  tenant                 TEXT    NOT NULL,
  user                   TEXT    NOT NULL,
  state                  TEXT    NOT NULL,  -- core::JobStateName
  reason                 TEXT    NOT NULL,  -- as of the last state change
  spec                   TEXT    NOT NULL,  -- JSON job spec v1
  priority               INTEGER NOT NULL,
  time_limit_ms          INTEGER NOT NULL,  -- 0: the scheduler's default
  checkpoint_interval_ms INTEGER NOT NULL,  -- 0: default; < 0: never
  submit_ms              INTEGER NOT NULL,
  start_ms               INTEGER,           -- first start; NULL: never started
  last_start_ms          INTEGER,           -- latest start or restart
  end_ms                 INTEGER,           -- set when terminal
  restarts               INTEGER NOT NULL DEFAULT 0,
  checkpoint_step        INTEGER NOT NULL DEFAULT -1,
  checkpoint_ms          INTEGER,
  ranks                  TEXT    NOT NULL DEFAULT '[]',  -- [[node, gpu], ...] while running
  spares                 TEXT    NOT NULL DEFAULT '[]',  -- [node, ...] while running
  submit_seq             INTEGER NOT NULL,  -- events.seq that submitted it
  updated_seq            INTEGER NOT NULL   -- events.seq that last changed the row
) STRICT;
CREATE INDEX jobs_state ON jobs(state);
CREATE INDEX jobs_tenant_state ON jobs(tenant, state);

CREATE TABLE tenants (
  name        TEXT PRIMARY KEY,
  config      TEXT NOT NULL,     -- JSON core::TenantConfig
  updated_seq INTEGER NOT NULL   -- 0: built in
) STRICT;
-- The core knows "default" from its first step; so does the store.
INSERT INTO tenants(name, config, updated_seq) VALUES (
  'default',
  '{"borrow_limit_gpus":-1,"guaranteed_gpus":0,"max_job_gpus":0,"max_running_jobs":0,"name":"default","shares":1.0}',
  0);

-- Nodes whose state the core changed; a node without a row has the core's
-- initial state (down until it registers, when heartbeats are required).
CREATE TABLE nodes (
  name    TEXT PRIMARY KEY,
  state   TEXT    NOT NULL,  -- core::NodeStateName
  reason  TEXT    NOT NULL,
  time_ms INTEGER NOT NULL
) STRICT;

-- Every GPU health change, oldest first.
CREATE TABLE gpu_health (
  seq     INTEGER NOT NULL,  -- events.seq
  node    TEXT    NOT NULL,
  gpu     INTEGER NOT NULL,
  health  TEXT    NOT NULL,  -- core::GpuHealthName
  reason  TEXT    NOT NULL,
  time_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX gpu_health_node ON gpu_health(node, gpu, seq);

CREATE TABLE users (
  name       TEXT PRIMARY KEY,
  tenant     TEXT    NOT NULL,
  role       TEXT    NOT NULL CHECK (role IN ('user', 'tenant-admin', 'cluster-admin')),
  created_ms INTEGER NOT NULL
) STRICT;

-- Bearer tokens, by the hex SHA-256 of the token; the token itself is never
-- stored.
CREATE TABLE tokens (
  hash       TEXT PRIMARY KEY,
  user       TEXT    NOT NULL REFERENCES users(name) ON DELETE CASCADE,
  created_ms INTEGER NOT NULL,
  revoked    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX tokens_user ON tokens(user);

-- Small named values: the topology and scheduler config the log was written
-- with, the daemon's settings.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;
