#pragma once
// topo-scheduler's settings: built-in defaults, then a config file
// (`--config FILE`, format below), then flags. packaging/topo-scheduler.conf
// is the documented example.
//
// File format: one `key = value` per line; `#` starts a comment; blank lines
// are ignored; values are taken verbatim after trimming (no quotes). An
// unknown key or a bad value is an error naming the file, the line and the
// accepted values.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

struct DaemonConfig {
  std::string state_dir;  // empty: DefaultStateDir()
  // --accept-data-loss, for one start (never a config file key): open a
  // store that is behind its commit mark (store.hpp, docs/store.md).
  bool accept_data_loss = false;
  std::string listen_host = "127.0.0.1";
  int listen_port = 8443;
  // Extra DNS names / IP addresses for the server certificate the daemon
  // creates on first start (localhost and 127.0.0.1 are always in it).
  std::vector<std::string> server_names;
  std::string tls_cert;  // empty: STATE_DIR/server.pem (created on first start)
  std::string tls_key;   // empty: STATE_DIR/server-key.pem
  int io_threads = 2;

  // Limits.
  int64_t max_body_bytes = 1 << 20;         // every route but topology import
  int64_t max_topology_bytes = 64ll << 20;  // PUT /v1/topology
  int64_t max_header_bytes = 16 << 10;
  int max_connections = 1024;
  // Connections not (yet) authenticated, per peer address (IPv4, or IPv6
  // as a whole address; loopback included). Formerly
  // max_connections_per_peer, still read under that name.
  int max_unauthenticated_per_peer = 64;
  // Connections of one user (by the token their requests carried), from
  // any addresses (docs/daemon.md, Connections).
  int max_connections_per_user = 64;
  double rate_limit_per_second = 20000;  // per user; burst twice that
  int request_timeout_s = 30;            // reading a request, writing an answer, queueing
  int idle_timeout_s = 120;              // a kept-alive connection with no request
  // Below this much free space on the state directory's filesystem, writes
  // are refused with 507 (reads go on; agents' reports still commit).
  int64_t min_free_disk_mb = 256;
  int read_threads = 2;  // threads (and read-only store connections) for off-strand reads
  // Snapshots and compaction (docs/store.md): after a commit, the core's
  // state is stored when snapshot_every_events events or
  // snapshot_every_minutes minutes (and at least one event) passed since
  // the last snapshot, so a start replays only the events after it (0 and 0:
  // never; then every start replays the whole log). Events older than the
  // oldest kept snapshot and than event_retention_days are deleted in
  // batches of compaction_batch_events, one transaction each.
  int64_t snapshot_every_events = 10000;  // 0..100000000; 0: not by count
  int64_t snapshot_every_minutes = 10;    // 0..10080; 0: not by time
  int64_t event_retention_days = 30;      // 0..36500; 0: as soon as covered
  int compaction_batch_events = 1000;     // 1..100000
  // The log (log.hpp): stderr, one line per record, from this level up.
  std::string log_level = "info";   // debug | info | warn | error
  std::string log_format = "text";  // text | json
  // A new connection's TLS handshake and whole first request, together.
  int first_request_timeout_s = 10;

  // Node agents (docs/agent-protocol.md): a second listener that requires a
  // client certificate signed by the daemon's CA. Host "off" disables it.
  // Unset (port -1): the API's host and its port + 1 (0 when the API's is 0).
  std::string agent_listen_host;
  int agent_listen_port = -1;
  int heartbeat_interval_ms = 1000;
  int missed_heartbeats_down = 3;  // a node silent this many intervals is down
  // A node whose agent said `leaving` before it closed (a restart or an
  // upgrade; its ranks keep running) is down only when it has not
  // registered again within this long (0: like any closed connection).
  int agent_restart_grace_ms = 30000;
  // How long the agents of a start's nodes have to answer `started` (their
  // ranks are launched) before the run is requeued (10..86400). Above the
  // agents' own launch waits (--launch-wait-ms, and --stage-wait-ms where
  // restarts copy checkpoints onto the node first).
  int start_ack_timeout_s = 600;
  // Lifetime of the node certificates `topo-scheduler ca issue` and `ca
  // renew` sign when no --days is given (1..3650). The server certificate
  // keeps its own.
  int agent_cert_days = 90;

  // ---- Slurm mode (docs/slurm.md): on when slurm_socket is set. The
  // job_submit/topo plugin asks on that unix socket; scontrol keeps the
  // view of nodes and jobs fresh.
  std::string slurm_socket;
  std::string slurm_topology;   // topology.conf imported at start (empty: keep the stored one)
  int slurm_gpus_per_node = 8;  // topology.conf does not say
  int slurm_poll_interval_ms = 2000;
  std::string slurm_bin_dir;   // where scontrol is (empty: $PATH)
  int slurm_min_nodes = 1;     // smaller jobs without a TOPO layout pass untouched
  int slurm_job_grace_s = 60;  // a placed job not seen in Slurm by then is cancelled
  int slurm_command_timeout_ms = 10000;
  std::string slurm_user = "slurm";  // who may use the socket (besides root and ourselves)

  // ---- High availability on etcd (docs/ha.md): on when ha_etcd_endpoints
  // is set; off (the single daemon of today) by default. Replicas with the
  // same endpoints and ha_cluster elect one leader; the others wait as
  // standbys with their listeners closed.
  std::vector<std::string> ha_etcd_endpoints;  // https://HOST:PORT of each member
  std::string ha_etcd_ca;                      // PEM: the CA of the members' certificates
  std::string ha_etcd_cert;                    // PEM: this replica's client certificate
  std::string ha_etcd_key;                     // PEM: its key
  int ha_lease_ttl_s = 5;                      // 2..60
  // etcd's --max-request-bytes on every member: a group commit whose batch is
  // larger goes to etcd as several appends (docs/ha.md, Size limits).
  int64_t ha_etcd_max_request_bytes = 1572864;  // 256 KiB..1 GiB
  std::string ha_name;                          // empty: the host name
  std::string ha_cluster = "default";           // keys live under /toposched/<ha_cluster>/
  bool ha_enabled() const { return !ha_etcd_endpoints.empty(); }

  // Policy: a named stack (SchedulerConfig::ForStack) and overrides.
  std::string stack = "toposched";
  int64_t default_time_limit_s = 24 * 3600;
  int64_t default_checkpoint_interval_s = 30 * 60;
  int64_t preempt_grace_s = 120;
  // Preemption's cost model and protection (core::SchedulerConfig): a
  // victim costs this many seconds per GPU besides its unsaved work; a job
  // preempted preempt_protect_after times is never preempted again (0: no
  // limit).
  int64_t preempt_restart_cost_s = 600;  // 0..86400
  int preempt_protect_after = 3;         // 0..1000
  // How long a job may wait for a faster placement (core::SchedulerConfig::
  // placement_wait) unless it or its tenant says otherwise; 0: never.
  int64_t placement_wait_s = 1800;  // 0..604800
  // A job eligible this long ranks ahead of fairshare (SchedulerConfig::
  // fairshare_max_wait); 0: fairshare alone.
  int64_t fairshare_max_wait_s = 0;  // 0..2592000
  // How long a rank's non-zero exit waits for a node of its job to turn
  // suspect or go down, which makes it part of that node's incident
  // (SchedulerConfig::attribution_window); 0: an application failure at once.
  int64_t attribution_window_ms = 5000;  // 0..600000
  bool backfill = true;
  // Queued jobs behind the blocked head that backfill looks at per pass
  // (SchedulerConfig::backfill_depth; Slurm's bf_max_job_test).
  int backfill_depth = 500;  // 1..100000
  bool preemption = true;
  // MASTER_PORT of every job start comes from this range on its master node
  // (below Linux's default ephemeral ports, 32768-60999).
  int master_port_first = 20000;
  int master_port_count = 12000;
  // Failures (docs/daemon.md, Failures). Only application failures (a rank
  // exits non-zero) count: the job fails at the max_app_failures-th in a row
  // without a new checkpoint. Each restart after one waits in the queue,
  // restart_backoff_initial_s doubling up to restart_backoff_max_s (0: at
  // once). Lost nodes, failed GPUs and drains never fail a job.
  int max_app_failures = 10;               // 1..1000
  int64_t restart_backoff_initial_s = 10;  // 0..86400
  int64_t restart_backoff_max_s = 600;     // 1..604800, at least the initial

  // Jobs whose user maps to the Unix account root (uid 0 on the node) are
  // refused unless this is true (docs/jobs.md).
  bool allow_root_jobs = false;
  // No user may be mapped to (or submit as) a Unix account whose uid on
  // this host is 1..min_job_uid-1 (docs/api.md, "Unix accounts"); uid 0 is
  // allow_root_jobs' alone. Accounts this host does not know pass: each
  // node's agent applies its own floor (topo-agent --min-job-uid).
  int64_t min_job_uid = 1000;  // 0..2147483647
  // Jobs one user may have waiting (queued or held) at once; submissions
  // past it are refused with the reason. 0: no limit. Tenants have their own
  // cap (max_queued_jobs in their quota).
  int max_queued_jobs_per_user = 10000;

  // The SchedulerConfig these settings give: the stack with the overrides,
  // nodes down until registered, liveness tracked by the daemon.
  core::Result<core::SchedulerConfig> SchedulerConfig() const;
};

// Applies the file's settings over config. path names the file in errors.
core::Status ApplyConfigText(std::string_view text, const std::string& path, DaemonConfig& config);
core::Status ApplyConfigFile(const std::string& path, DaemonConfig& config);

// "HOST:PORT" -> host and port; "[::1]:8443" for IPv6.
core::Status ParseListen(std::string_view text, DaemonConfig& config);

// $TOPO_STATE_DIR, else $XDG_DATA_HOME/toposched, else $HOME/.local/share/toposched
// (the `topo` client reads the same TOPO_STATE_DIR).
std::string DefaultStateDir();

// The policy part of the config as JSON text (kept in the store's meta: a
// replay uses the policy the log was written with).
std::string PolicyJson(const DaemonConfig& config);
core::Status ApplyPolicyJson(std::string_view json, DaemonConfig& config);

// The policy keys `topo config set` may change while the daemon runs (the
// core's SchedulingPolicy); stack and master_ports need a new state dir.
const std::vector<std::string>& LivePolicyKeys();
// Sets one live key to value as the config file would (same parser, same
// ranges, errors naming the key and the accepted values), on a copy that
// must still make a valid SchedulerConfig; config is unchanged on error.
core::Status SetLivePolicyKey(std::string_view key, std::string_view value, DaemonConfig& config);
// A live key's value as the config file writes it ("120", "true", "never").
std::string LivePolicyValue(const DaemonConfig& config, std::string_view key);
// The live keys of config set from the core's policy (after a replay of
// PolicyChanged events).
void SyncLivePolicy(const core::SchedulingPolicy& policy, DaemonConfig& config);

}  // namespace topo::daemon
