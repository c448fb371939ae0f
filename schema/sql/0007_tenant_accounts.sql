-- toposched store, schema version 7: the Unix accounts a cluster-admin
-- granted a tenant (docs/api.md, "Unix accounts"). A tenant-admin maps the
-- users of a tenant only to these: an account of `accounts` (a JSON list of
-- names) or a member of `unix_group`. Outside the event log, like users:
-- they decide who may run as whom, not where jobs run. A tenant without a
-- row has no grant (only cluster-admins map its users).
CREATE TABLE tenant_accounts (
  tenant     TEXT PRIMARY KEY,
  accounts   TEXT NOT NULL DEFAULT '[]',
  unix_group TEXT NOT NULL DEFAULT ''
) STRICT;
