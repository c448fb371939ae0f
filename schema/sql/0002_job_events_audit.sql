-- toposched store, schema version 2: a per-job index into the event log and
-- an audit table for changes outside it.

-- (job, seq) for every logged event whose event or commands name the job:
-- `topo show JOB`'s history without scanning the log.
CREATE TABLE job_events (
  job INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  PRIMARY KEY (job, seq)
) STRICT, WITHOUT ROWID;
INSERT OR IGNORE INTO job_events(job, seq)
  SELECT json_extract(body, '$.event.id'), seq FROM events
  WHERE json_extract(body, '$.event.id') IS NOT NULL;
INSERT OR IGNORE INTO job_events(job, seq)
  SELECT json_extract(c.value, '$.id'), e.seq FROM events e, json_each(e.body, '$.commands') c
  WHERE json_extract(c.value, '$.id') IS NOT NULL;

-- Who changed what outside the scheduler's event log: users, tokens,
-- topology imports. Never read back by the core.
CREATE TABLE audit (
  seq     INTEGER PRIMARY KEY,
  time_ms INTEGER NOT NULL,
  actor   TEXT    NOT NULL,  -- "user:ada"
  action  TEXT    NOT NULL,  -- "user.create", "token.revoke", "topology.import", ...
  detail  TEXT    NOT NULL   -- JSON object
) STRICT;
