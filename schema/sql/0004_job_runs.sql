-- toposched store: one row per run of a job (its placement, start, end, why
-- it ended, GPU-ms), for `topo show`, `topo history` and usage reports; and
-- the indexes those queries need. Self-contained: it reads only tables of
-- 0001-0003, so it may be renumbered after any other migration.
--
-- A run begins at a start_job or restart_job command and ends at the job's
-- next restart_job, start_job, stop_job, or job_state_changed to a state that
-- holds no GPUs (not running, not preempting), whichever comes first in log
-- order (seq, then command index). store_tables.cpp materializes new runs by
-- the same rule; the backfill below derives the runs of every job already in
-- the log, so a migrated store and a store rebuilt from the log agree.

CREATE TABLE job_runs (
  job        INTEGER NOT NULL,  -- jobs.id
  run        INTEGER NOT NULL,  -- 1, 2, ... in start order
  start_ms   INTEGER NOT NULL,
  end_ms     INTEGER,           -- NULL while it runs
  gpus       INTEGER NOT NULL,  -- ranks of this run
  nodes      INTEGER NOT NULL,  -- distinct nodes of this run
  ranks      TEXT    NOT NULL,  -- [[node, gpu], ...] by rank
  end_reason TEXT,              -- NULL while it runs
  exit_code  INTEGER,           -- the exit status that ended it, if one did
  gpu_ms     INTEGER,           -- (end_ms - start_ms) * gpus once ended
  start_seq  INTEGER NOT NULL,  -- events.seq of the start
  end_seq    INTEGER,           -- events.seq of the end
  PRIMARY KEY (job, run)
) STRICT;
CREATE INDEX job_runs_end ON job_runs(end_ms);
CREATE INDEX job_runs_start ON job_runs(start_ms);

CREATE INDEX jobs_end ON jobs(end_ms);
CREATE INDEX jobs_submit ON jobs(submit_ms);
CREATE INDEX jobs_start ON jobs(start_ms);
CREATE INDEX jobs_user_id ON jobs(user, id);
CREATE INDEX jobs_tenant_id ON jobs(tenant, id);

WITH bounds AS (
  SELECT e.seq AS seq, CAST(c.key AS INTEGER) AS idx, e.time_ms AS time_ms, e.kind AS kind,
         e.body AS body, json_extract(c.value, '$.type') AS type,
         json_extract(c.value, '$.id') AS job, c.value AS command
  FROM events e, json_each(e.body, '$.commands') c
  WHERE json_extract(c.value, '$.type') IN ('start_job', 'restart_job', 'stop_job')
     OR (json_extract(c.value, '$.type') = 'job_state_changed'
         AND json_extract(c.value, '$.state') NOT IN ('running', 'preempting'))
),
linked AS (
  SELECT b.*,
         LEAD(type) OVER w AS end_type,
         LEAD(time_ms) OVER w AS end_time,
         LEAD(seq) OVER w AS end_seq,
         LEAD(kind) OVER w AS end_kind,
         LEAD(command) OVER w AS end_command,
         LEAD(body) OVER w AS end_body
  FROM bounds b
  WINDOW w AS (PARTITION BY job ORDER BY seq, idx)
),
runs AS (
  SELECT job, seq, idx, time_ms, end_type, end_time, end_seq, end_kind, end_command, end_body,
         json_extract(command, '$.ranks') AS ranks,
         json_array_length(command, '$.ranks') AS gpus,
         (SELECT COUNT(DISTINCT json_extract(r.value, '$[0]'))
          FROM json_each(command, '$.ranks') r) AS nodes
  FROM linked
  WHERE type IN ('start_job', 'restart_job')
)
INSERT INTO job_runs(job, run, start_ms, end_ms, gpus, nodes, ranks, end_reason, exit_code,
                     gpu_ms, start_seq, end_seq)
SELECT job,
       ROW_NUMBER() OVER (PARTITION BY job ORDER BY seq, idx),
       time_ms, end_time, gpus, nodes, ranks,
       CASE end_type
         WHEN 'start_job' THEN 'started again'
         WHEN 'restart_job' THEN 'restarted after ' ||
           CASE end_kind
             WHEN 'rank_exited' THEN
               'rank ' || json_extract(end_body, '$.event.rank') || ' exited with status ' ||
               json_extract(end_body, '$.event.exit_code')
             WHEN 'gpu_event' THEN
               json_extract(end_body, '$.event.kind') || ' ' ||
               json_extract(end_body, '$.event.code') || ' on ' ||
               json_extract(end_body, '$.event.node') || ' GPU ' ||
               json_extract(end_body, '$.event.gpu')
             WHEN 'node_state_requested' THEN
               'node ' || json_extract(end_body, '$.event.node') || ' ' ||
               json_extract(end_body, '$.event.state') ||
               CASE WHEN json_extract(end_body, '$.event.reason') <> ''
                    THEN ': ' || json_extract(end_body, '$.event.reason') ELSE '' END
             WHEN 'node_evacuated' THEN
               'node ' || json_extract(end_body, '$.event.node') || ' was drained'
             ELSE end_kind ||
               CASE WHEN json_type(end_body, '$.event.reason') = 'text'
                         AND json_extract(end_body, '$.event.reason') <> ''
                    THEN ': ' || json_extract(end_body, '$.event.reason') ELSE '' END
           END
         ELSE json_extract(end_command, '$.reason')
       END,
       CASE WHEN end_type IS NOT NULL AND end_kind IN ('job_finished', 'rank_exited')
                 AND json_extract(end_body, '$.event.id') = job
            THEN json_extract(end_body, '$.event.exit_code') END,
       (end_time - time_ms) * gpus,
       seq, end_seq
FROM runs;
