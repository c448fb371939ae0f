-- toposched store, schema version 3: the Unix account each user's jobs run
-- as on the nodes (docs/jobs.md). Existing users keep their own name.
ALTER TABLE users ADD COLUMN unix_user TEXT NOT NULL DEFAULT '';
UPDATE users SET unix_user = name;
