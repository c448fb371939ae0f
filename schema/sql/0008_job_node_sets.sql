-- toposched store, schema version 8: the partition and the reservation a job
-- names (docs/api.md, Partitions and reservations), so the views of jobs that
-- left the scheduler still show them. The sets themselves live in the event
-- log and the scheduler's snapshots. Older jobs and jobs naming none have
-- NULL.
ALTER TABLE jobs ADD COLUMN partition TEXT;
ALTER TABLE jobs ADD COLUMN reservation TEXT;
