-- toposched store, schema version 6: a submission's client_request_id (its
-- idempotency key, docs/api.md), so a retried submission from the same user
-- finds the jobs the first one made. Older jobs have none (NULL).
ALTER TABLE jobs ADD COLUMN client_request_id TEXT;
CREATE INDEX jobs_client_request ON jobs(user, client_request_id)
  WHERE client_request_id IS NOT NULL;
