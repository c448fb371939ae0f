-- toposched store, schema version 5: snapshots of the scheduling core, so a
-- start restores the newest one and replays only the events after it
-- (docs/store.md, Snapshots and compaction).

-- One row per snapshot, written in one transaction. `state` is
-- SchedulerCore::Snapshot(): the core's whole state after events.seq `seq`
-- (the events up to and including it are in it), in the snapshot format
-- `format` (SchedulerCore::kSnapshotVersion). The store keeps the newest two.
CREATE TABLE snapshots (
  seq        INTEGER PRIMARY KEY,  -- the last events.seq it covers
  time_ms    INTEGER NOT NULL,     -- that event's time
  format     INTEGER NOT NULL,     -- snapshot format version
  created_ms INTEGER NOT NULL,     -- wall clock when it was written
  state      BLOB    NOT NULL
) STRICT;

-- Compaction deletes the oldest events and their job_events rows by seq.
CREATE INDEX job_events_seq ON job_events(seq);
