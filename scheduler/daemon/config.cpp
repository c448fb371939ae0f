// topo-scheduler settings: defaults, config file, policy JSON.

#include "daemon/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Status ParseInt(std::string_view v, int64_t lo, int64_t hi, int64_t& out) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return Status::Error("\"" + std::string(v) + "\" is not a whole number");
  }
  if (x < lo || x > hi) {
    return Status::Error(std::to_string(x) + " is out of range; use " + std::to_string(lo) + ".." +
                         std::to_string(hi));
  }
  out = x;
  return Status::Ok();
}

Status ParseBool(std::string_view v, bool& out) {
  if (v == "true" || v == "yes" || v == "on" || v == "1") {
    out = true;
  } else if (v == "false" || v == "no" || v == "off" || v == "0") {
    out = false;
  } else {
    return Status::Error("\"" + std::string(v) + "\" is not true or false");
  }
  return Status::Ok();
}

using Setter = std::function<Status(std::string_view, DaemonConfig&)>;

// The failure and preemption policies' integer keys (and backfill_depth),
// their ranges and fields: one table for the config file and the stored
// policy (a store from before a key existed gets the key's built-in default).
struct FailureKey {
  std::string_view key;
  int64_t lo, hi;
  int64_t (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, int64_t);
  // The value a stored policy without the key replays with: what the core
  // did before the key existed (nullopt: the built-in default).
  std::optional<int64_t> absent = std::nullopt;
};
constexpr FailureKey kFailureKeys[] = {
    {"max_app_failures", 1, 1000,
     [](const DaemonConfig& c) -> int64_t { return c.max_app_failures; },
     [](DaemonConfig& c, int64_t x) { c.max_app_failures = static_cast<int>(x); }},
    {"restart_backoff_initial_s", 0, 86400,
     [](const DaemonConfig& c) { return c.restart_backoff_initial_s; },
     [](DaemonConfig& c, int64_t x) { c.restart_backoff_initial_s = x; }},
    {"restart_backoff_max_s", 1, 7 * 86400,
     [](const DaemonConfig& c) { return c.restart_backoff_max_s; },
     [](DaemonConfig& c, int64_t x) { c.restart_backoff_max_s = x; }},
    {"preempt_restart_cost_s", 0, 86400,
     [](const DaemonConfig& c) { return c.preempt_restart_cost_s; },
     [](DaemonConfig& c, int64_t x) { c.preempt_restart_cost_s = x; }, 0},
    {"preempt_protect_after", 0, 1000,
     [](const DaemonConfig& c) -> int64_t { return c.preempt_protect_after; },
     [](DaemonConfig& c, int64_t x) { c.preempt_protect_after = static_cast<int>(x); }, 0},
    {"placement_wait_s", 0, 7 * 86400, [](const DaemonConfig& c) { return c.placement_wait_s; },
     [](DaemonConfig& c, int64_t x) { c.placement_wait_s = x; }, 0},
    {"fairshare_max_wait_s", 0, 30 * 86400,
     [](const DaemonConfig& c) { return c.fairshare_max_wait_s; },
     [](DaemonConfig& c, int64_t x) { c.fairshare_max_wait_s = x; }, 0},
    {"attribution_window_ms", 0, 600000,
     [](const DaemonConfig& c) { return c.attribution_window_ms; },
     [](DaemonConfig& c, int64_t x) { c.attribution_window_ms = x; }, 0},
    {"backfill_depth", 1, 100000, [](const DaemonConfig& c) -> int64_t { return c.backfill_depth; },
     [](DaemonConfig& c, int64_t x) { c.backfill_depth = static_cast<int>(x); }, 64},
};

// What no single key can check: the backoff's cap is not below its start.
Status CheckFailurePolicy(const DaemonConfig& c) {
  if (c.restart_backoff_max_s < c.restart_backoff_initial_s) {
    return Status::Error("restart_backoff_max_s (" + std::to_string(c.restart_backoff_max_s) +
                         ") must be at least restart_backoff_initial_s (" +
                         std::to_string(c.restart_backoff_initial_s) + ")");
  }
  return Status::Ok();
}

// A PEM file's path for HA: absolute (a service's working directory is
// not the admin's), at most 4096 bytes. Whether it reads is checked at start.
Setter PathSetter(std::string DaemonConfig::*field) {
  return [field](std::string_view v, DaemonConfig& c) {
    if (!v.empty() && (v.front() != '/' || v.size() > 4096)) {
      return Status::Error("\"" + std::string(v.substr(0, 100)) +
                           "\" must be an absolute path of at most 4096 bytes");
    }
    c.*field = std::string(v);
    return Status::Ok();
  };
}

// A name that becomes part of an etcd key or value: 1-64 of [A-Za-z0-9._-].
Setter NameSetter(std::string DaemonConfig::*field) {
  return [field](std::string_view v, DaemonConfig& c) {
    const bool ok = !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
    });
    if (!ok) {
      return Status::Error("\"" + std::string(v.substr(0, 100)) +
                           "\" must be 1-64 characters of A-Z a-z 0-9 . _ -");
    }
    c.*field = std::string(v);
    return Status::Ok();
  };
}

// HA needs its endpoints and all three PEM files together, or none of them.
Status CheckHa(const DaemonConfig& c) {
  const bool any_file = !c.ha_etcd_ca.empty() || !c.ha_etcd_cert.empty() || !c.ha_etcd_key.empty();
  if (!c.ha_enabled()) {
    if (any_file) {
      return Status::Error(
          "ha_etcd_ca, ha_etcd_cert and ha_etcd_key need ha_etcd_endpoints (the etcd members, "
          "https://HOST:PORT,...); without it topo-scheduler runs alone, without HA");
    }
    return Status::Ok();
  }
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"ha_etcd_ca", &c.ha_etcd_ca},
        {"ha_etcd_cert", &c.ha_etcd_cert},
        {"ha_etcd_key", &c.ha_etcd_key}}) {
    if (value->empty()) {
      return Status::Error(std::string(key) +
                           " is required with ha_etcd_endpoints: etcd is reached over TLS with a "
                           "client certificate (docs/ha.md)");
    }
  }
  return Status::Ok();
}

Setter IntSetter(int64_t lo, int64_t hi, std::function<void(DaemonConfig&, int64_t)> set) {
  return [lo, hi, set](std::string_view v, DaemonConfig& c) {
    int64_t x = 0;
    if (Status s = ParseInt(v, lo, hi, x); !s.ok()) return s;
    set(c, x);
    return Status::Ok();
  };
}

const std::map<std::string, Setter, std::less<>>& Setters() {
  static const auto* setters = new std::map<std::string, Setter, std::less<>>{
      {"listen", [](std::string_view v, DaemonConfig& c) { return ParseListen(v, c); }},
      {"agent_listen",
       [](std::string_view v, DaemonConfig& c) {
         if (v == "off") {
           c.agent_listen_host = "off";
           c.agent_listen_port = 0;
           return Status::Ok();
         }
         DaemonConfig tmp;
         if (Status s = ParseListen(v, tmp); !s.ok()) return s;
         c.agent_listen_host = tmp.listen_host;
         c.agent_listen_port = tmp.listen_port;
         return Status::Ok();
       }},
      {"heartbeat_interval_ms", IntSetter(50, 600000,
                                          [](DaemonConfig& c, int64_t x) {
                                            c.heartbeat_interval_ms = static_cast<int>(x);
                                          })},
      {"missed_heartbeats_down", IntSetter(1, 1000,
                                           [](DaemonConfig& c, int64_t x) {
                                             c.missed_heartbeats_down = static_cast<int>(x);
                                           })},
      {"agent_restart_grace_ms", IntSetter(0, 3600000,
                                           [](DaemonConfig& c, int64_t x) {
                                             c.agent_restart_grace_ms = static_cast<int>(x);
                                           })},
      {"start_ack_timeout_s", IntSetter(10, 86400,
                                        [](DaemonConfig& c, int64_t x) {
                                          c.start_ack_timeout_s = static_cast<int>(x);
                                        })},
      {"agent_cert_days",
       IntSetter(1, 3650,
                 [](DaemonConfig& c, int64_t x) { c.agent_cert_days = static_cast<int>(x); })},
      {"state_dir",
       [](std::string_view v, DaemonConfig& c) {
         c.state_dir = std::string(v);
         return Status::Ok();
       }},
      {"server_names",
       [](std::string_view v, DaemonConfig& c) {
         c.server_names.clear();
         std::string item;
         std::istringstream in{std::string(v)};
         while (std::getline(in, item, ',')) {
           std::string_view t = Trim(item);
           if (!t.empty()) c.server_names.emplace_back(t);
         }
         return Status::Ok();
       }},
      {"tls_cert",
       [](std::string_view v, DaemonConfig& c) {
         c.tls_cert = std::string(v);
         return Status::Ok();
       }},
      {"tls_key",
       [](std::string_view v, DaemonConfig& c) {
         c.tls_key = std::string(v);
         return Status::Ok();
       }},
      {"io_threads",
       IntSetter(1, 64, [](DaemonConfig& c, int64_t x) { c.io_threads = static_cast<int>(x); })},
      {"max_body_bytes",
       IntSetter(1024, 1ll << 30, [](DaemonConfig& c, int64_t x) { c.max_body_bytes = x; })},
      {"max_topology_bytes",
       IntSetter(1024, 1ll << 32, [](DaemonConfig& c, int64_t x) { c.max_topology_bytes = x; })},
      {"max_header_bytes",
       IntSetter(1024, 1 << 20, [](DaemonConfig& c, int64_t x) { c.max_header_bytes = x; })},
      {"max_connections",
       IntSetter(1, 1000000,
                 [](DaemonConfig& c, int64_t x) { c.max_connections = static_cast<int>(x); })},
      {"max_unauthenticated_per_peer", IntSetter(1, 1000000,
                                                 [](DaemonConfig& c, int64_t x) {
                                                   c.max_unauthenticated_per_peer =
                                                       static_cast<int>(x);
                                                 })},
      {"max_connections_per_user", IntSetter(1, 1000000,
                                             [](DaemonConfig& c, int64_t x) {
                                               c.max_connections_per_user = static_cast<int>(x);
                                             })},
      {"first_request_timeout_s", IntSetter(1, 3600,
                                            [](DaemonConfig& c, int64_t x) {
                                              c.first_request_timeout_s = static_cast<int>(x);
                                            })},
      {"rate_limit_per_second",
       IntSetter(1, 100000000,
                 [](DaemonConfig& c, int64_t x) { c.rate_limit_per_second = double(x); })},
      {"request_timeout_s",
       IntSetter(1, 3600,
                 [](DaemonConfig& c, int64_t x) { c.request_timeout_s = static_cast<int>(x); })},
      {"idle_timeout_s",
       IntSetter(1, 86400,
                 [](DaemonConfig& c, int64_t x) { c.idle_timeout_s = static_cast<int>(x); })},
      {"ha_etcd_endpoints",
       [](std::string_view v, DaemonConfig& c) {
         std::vector<std::string> out;
         size_t start = 0;
         while (start <= v.size()) {
           size_t comma = v.find(',', start);
           if (comma == std::string_view::npos) comma = v.size();
           const std::string_view e = Trim(v.substr(start, comma - start));
           start = comma + 1;
           if (e.empty()) continue;
           if (e.substr(0, 8) != "https://" || e.size() > 300) {
             return Status::Error("\"" + std::string(e.substr(0, 300)) +
                                  "\" must be https://HOST:PORT (etcd's client URL over TLS), "
                                  "e.g. https://10.0.0.1:2379,https://10.0.0.2:2379");
           }
           out.emplace_back(e);
           if (out.size() > 32) return Status::Error("at most 32 endpoints");
         }
         c.ha_etcd_endpoints = std::move(out);
         return Status::Ok();
       }},
      {"ha_etcd_ca", PathSetter(&DaemonConfig::ha_etcd_ca)},
      {"ha_etcd_cert", PathSetter(&DaemonConfig::ha_etcd_cert)},
      {"ha_etcd_key", PathSetter(&DaemonConfig::ha_etcd_key)},
      {"ha_lease_ttl_s",
       IntSetter(2, 60, [](DaemonConfig& c, int64_t x) { c.ha_lease_ttl_s = static_cast<int>(x); })},
      {"ha_etcd_max_request_bytes",
       IntSetter(256 << 10, int64_t{1} << 30,
                 [](DaemonConfig& c, int64_t x) { c.ha_etcd_max_request_bytes = x; })},
      {"ha_name", NameSetter(&DaemonConfig::ha_name)},
      {"ha_cluster", NameSetter(&DaemonConfig::ha_cluster)},
      {"slurm_socket",
       [](std::string_view v, DaemonConfig& c) {
         if (!v.empty() && (v[0] != '/' || v.size() > 100)) {
           return Status::Error("slurm_socket must be an absolute path of at most 100 bytes");
         }
         c.slurm_socket = std::string(v);
         return Status::Ok();
       }},
      {"slurm_topology",
       [](std::string_view v, DaemonConfig& c) {
         c.slurm_topology = std::string(v);
         return Status::Ok();
       }},
      {"slurm_bin_dir",
       [](std::string_view v, DaemonConfig& c) {
         c.slurm_bin_dir = std::string(v);
         return Status::Ok();
       }},
      {"slurm_user",
       [](std::string_view v, DaemonConfig& c) {
         c.slurm_user = std::string(v);
         return Status::Ok();
       }},
      {"slurm_gpus_per_node", IntSetter(1, 64,
                                        [](DaemonConfig& c, int64_t x) {
                                          c.slurm_gpus_per_node = static_cast<int>(x);
                                        })},
      {"slurm_poll_interval_ms", IntSetter(50, 600000,
                                           [](DaemonConfig& c, int64_t x) {
                                             c.slurm_poll_interval_ms = static_cast<int>(x);
                                           })},
      {"slurm_min_nodes", IntSetter(1, 1000000,
                                    [](DaemonConfig& c, int64_t x) {
                                      c.slurm_min_nodes = static_cast<int>(x);
                                    })},
      {"slurm_job_grace_s", IntSetter(1, 86400,
                                      [](DaemonConfig& c, int64_t x) {
                                        c.slurm_job_grace_s = static_cast<int>(x);
                                      })},
      {"slurm_command_timeout_ms", IntSetter(100, 600000,
                                             [](DaemonConfig& c, int64_t x) {
                                               c.slurm_command_timeout_ms = static_cast<int>(x);
                                             })},
      {"stack",
       [](std::string_view v, DaemonConfig& c) {
         if (!core::SchedulerConfig::ForStack(v)) {
           std::string names;
           for (const std::string& n : core::SchedulerConfig::StackNames()) {
             names += (names.empty() ? "" : ", ") + n;
           }
           return Status::Error("unknown stack \"" + std::string(v) + "\"; use one of " + names);
         }
         c.stack = std::string(v);
         return Status::Ok();
       }},
      {"default_time_limit_s",
       IntSetter(60, 365ll * 86400,
                 [](DaemonConfig& c, int64_t x) { c.default_time_limit_s = x; })},
      {"default_checkpoint_interval_s",
       IntSetter(-1, 30ll * 86400,
                 [](DaemonConfig& c, int64_t x) { c.default_checkpoint_interval_s = x; })},
      {"preempt_grace_s",
       IntSetter(0, 86400, [](DaemonConfig& c, int64_t x) { c.preempt_grace_s = x; })},
      {"backfill", [](std::string_view v, DaemonConfig& c) { return ParseBool(v, c.backfill); }},
      {"preemption",
       [](std::string_view v, DaemonConfig& c) { return ParseBool(v, c.preemption); }},
      {"min_free_disk_mb",
       IntSetter(0, 1 << 20, [](DaemonConfig& c, int64_t x) { c.min_free_disk_mb = x; })},
      {"read_threads", IntSetter(1, 64,
                                 [](DaemonConfig& c, int64_t x) {
                                   c.read_threads = static_cast<int>(x);
                                 })},
      {"snapshot_every_events", IntSetter(0, 100000000,
                                          [](DaemonConfig& c, int64_t x) {
                                            c.snapshot_every_events = x;
                                          })},
      {"snapshot_every_minutes", IntSetter(0, 10080,
                                           [](DaemonConfig& c, int64_t x) {
                                             c.snapshot_every_minutes = x;
                                           })},
      {"event_retention_days", IntSetter(0, 36500,
                                         [](DaemonConfig& c, int64_t x) {
                                           c.event_retention_days = x;
                                         })},
      {"compaction_batch_events", IntSetter(1, 100000,
                                            [](DaemonConfig& c, int64_t x) {
                                              c.compaction_batch_events = static_cast<int>(x);
                                            })},
      {"max_queued_jobs_per_user", IntSetter(0, 100000000,
                                             [](DaemonConfig& c, int64_t x) {
                                               c.max_queued_jobs_per_user = static_cast<int>(x);
                                             })},
      {"log_level",
       [](std::string_view v, DaemonConfig& c) {
         if (v != "debug" && v != "info" && v != "warn" && v != "error") {
           return Status::Error("use debug, info, warn or error");
         }
         c.log_level = std::string(v);
         return Status::Ok();
       }},
      {"log_format",
       [](std::string_view v, DaemonConfig& c) {
         if (v != "text" && v != "json") return Status::Error("use text or json");
         c.log_format = std::string(v);
         return Status::Ok();
       }},
      {"allow_root_jobs",
       [](std::string_view v, DaemonConfig& c) { return ParseBool(v, c.allow_root_jobs); }},
      {"min_job_uid",
       IntSetter(0, 2147483647, [](DaemonConfig& c, int64_t x) { c.min_job_uid = x; })},
      {"max_app_failures", IntSetter(kFailureKeys[0].lo, kFailureKeys[0].hi, kFailureKeys[0].set)},
      {"restart_backoff_initial_s",
       IntSetter(kFailureKeys[1].lo, kFailureKeys[1].hi, kFailureKeys[1].set)},
      {"restart_backoff_max_s",
       IntSetter(kFailureKeys[2].lo, kFailureKeys[2].hi, kFailureKeys[2].set)},
      {"preempt_restart_cost_s",
       IntSetter(kFailureKeys[3].lo, kFailureKeys[3].hi, kFailureKeys[3].set)},
      {"preempt_protect_after",
       IntSetter(kFailureKeys[4].lo, kFailureKeys[4].hi, kFailureKeys[4].set)},
      {"placement_wait_s", IntSetter(kFailureKeys[5].lo, kFailureKeys[5].hi, kFailureKeys[5].set)},
      {"fairshare_max_wait_s",
       IntSetter(kFailureKeys[6].lo, kFailureKeys[6].hi, kFailureKeys[6].set)},
      {"attribution_window_ms",
       IntSetter(kFailureKeys[7].lo, kFailureKeys[7].hi, kFailureKeys[7].set)},
      {"backfill_depth", IntSetter(kFailureKeys[8].lo, kFailureKeys[8].hi, kFailureKeys[8].set)},
      {"master_ports",
       [](std::string_view v, DaemonConfig& c) {
         const size_t dash = v.find('-');
         int64_t first = 0, last = 0;
         if (dash == std::string_view::npos ||
             !ParseInt(Trim(v.substr(0, dash)), 1024, 65535, first).ok() ||
             !ParseInt(Trim(v.substr(dash + 1)), 1024, 65535, last).ok() || last < first) {
           return Status::Error("expected FIRST-LAST within 1024-65535, e.g. 20000-31999");
         }
         c.master_port_first = static_cast<int>(first);
         c.master_port_count = static_cast<int>(last - first + 1);
         return Status::Ok();
       }},
  };
  return *setters;
}

}  // namespace

Result<core::SchedulerConfig> DaemonConfig::SchedulerConfig() const {
  std::optional<core::SchedulerConfig> c = core::SchedulerConfig::ForStack(stack);
  if (!c) return Status::Error("unknown stack \"" + stack + "\"");
  c->default_time_limit = default_time_limit_s * core::kSecond;
  c->default_checkpoint_interval = default_checkpoint_interval_s < 0
                                       ? core::kNever
                                       : default_checkpoint_interval_s * core::kSecond;
  c->preempt_grace = preempt_grace_s * core::kSecond;
  c->backfill = backfill;
  c->preemption = preemption;
  c->heartbeats_required = false;
  c->nodes_start_down = true;
  c->master_ports = core::PortRange{master_port_first, master_port_count};
  if (Status s = CheckFailurePolicy(*this); !s.ok()) return s;
  c->max_app_failures = max_app_failures;
  c->restart_backoff_initial = restart_backoff_initial_s * core::kSecond;
  c->restart_backoff_max = restart_backoff_max_s * core::kSecond;
  c->preempt_restart_cost = preempt_restart_cost_s * core::kSecond;
  c->preempt_protect_after = preempt_protect_after;
  c->placement_wait = placement_wait_s * core::kSecond;
  c->fairshare_max_wait = fairshare_max_wait_s * core::kSecond;
  c->attribution_window = attribution_window_ms;
  c->backfill_depth = backfill_depth;
  return *c;
}

Status ParseListen(std::string_view text, DaemonConfig& config) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::Error("listen address \"" + std::string(text) +
                         "\" must be HOST:PORT, e.g. 127.0.0.1:8443 or [::1]:8443");
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int64_t port = 0;
  if (Status s = ParseInt(text.substr(colon + 1), 0, 65535, port); !s.ok()) {
    return Status::Error("listen address \"" + std::string(text) + "\": port " + s.message());
  }
  config.listen_host = std::string(host);
  config.listen_port = static_cast<int>(port);
  return Status::Ok();
}

Status ApplyConfigText(std::string_view text, const std::string& path, DaemonConfig& config) {
  DaemonConfig next = config;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = Trim(line);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::Error(where + "expected `key = value`, got \"" + std::string(line) + "\"");
    }
    const std::string_view key = Trim(line.substr(0, eq));
    const std::string_view value = Trim(line.substr(eq + 1));
    // Keys read under a former name (docs/daemon.md).
    auto it = Setters().find(
        key == "max_connections_per_peer" ? std::string_view("max_unauthenticated_per_peer") : key);
    if (it == Setters().end()) {
      std::string keys;
      for (const auto& [k, unused] : Setters()) keys += (keys.empty() ? "" : ", ") + k;
      return Status::Error(where + "unknown key \"" + std::string(key) + "\"; known keys: " + keys);
    }
    if (Status s = it->second(value, next); !s.ok()) {
      return Status::Error(where + std::string(key) + ": " + s.message());
    }
    if (pos > text.size()) break;
  }
  if (Status s = CheckFailurePolicy(next); !s.ok()) return Status::Error(path + ": " + s.message());
  if (Status s = CheckHa(next); !s.ok()) return Status::Error(path + ": " + s.message());
  config = std::move(next);
  return Status::Ok();
}

Status ApplyConfigFile(const std::string& path, DaemonConfig& config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read config file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return ApplyConfigText(text.str(), path, config);
}

std::string DefaultStateDir() {
  // One setting for the daemon and the `topo` client (cli/client/connection.hpp).
  if (const char* dir = std::getenv("TOPO_STATE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/toposched";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.local/share/toposched";
}

std::string PolicyJson(const DaemonConfig& c) {
  nlohmann::json j{{"stack", c.stack},
                   {"default_time_limit_s", c.default_time_limit_s},
                   {"default_checkpoint_interval_s", c.default_checkpoint_interval_s},
                   {"preempt_grace_s", c.preempt_grace_s},
                   {"backfill", c.backfill},
                   {"preemption", c.preemption},
                   {"master_port_first", c.master_port_first},
                   {"master_port_count", c.master_port_count}};
  for (const FailureKey& k : kFailureKeys) j[std::string(k.key)] = k.get(c);
  return j.dump();
}

Status ApplyPolicyJson(std::string_view text, DaemonConfig& c) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Error("the stored policy is not a JSON object");
  try {
    DaemonConfig next = c;
    next.stack = j.at("stack").get<std::string>();
    next.default_time_limit_s = j.at("default_time_limit_s").get<int64_t>();
    next.default_checkpoint_interval_s = j.at("default_checkpoint_interval_s").get<int64_t>();
    next.preempt_grace_s = j.at("preempt_grace_s").get<int64_t>();
    next.backfill = j.at("backfill").get<bool>();
    next.preemption = j.at("preemption").get<bool>();
    // Stores from before master ports were policy keep the default range.
    if (j.contains("master_port_first")) {
      next.master_port_first = j.at("master_port_first").get<int>();
      next.master_port_count = j.at("master_port_count").get<int>();
    }
    // Stores from before a key existed get what the core did then (the
    // key's `absent`) or its built-in default, never the file's: every later
    // start replays them the same way.
    const DaemonConfig defaults;
    for (const FailureKey& k : kFailureKeys) {
      auto it = j.find(std::string(k.key));
      if (it == j.end()) {
        k.set(next, k.absent.value_or(k.get(defaults)));
        continue;
      }
      if (!it->is_number_integer() || it->get<int64_t>() < k.lo || it->get<int64_t>() > k.hi) {
        return Status::Error("the stored policy: " + std::string(k.key) + " is " + it->dump() +
                             "; use " + std::to_string(k.lo) + ".." + std::to_string(k.hi));
      }
      k.set(next, it->get<int64_t>());
    }
    if (Status s = CheckFailurePolicy(next); !s.ok()) {
      return Status::Error("the stored policy: " + s.message());
    }
    if (!core::SchedulerConfig::ForStack(next.stack)) {
      return Status::Error("the stored policy names an unknown stack \"" + next.stack + "\"");
    }
    c = std::move(next);
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("the stored policy is incomplete: ") + e.what());
  }
  return Status::Ok();
}

const std::vector<std::string>& LivePolicyKeys() {
  static const std::vector<std::string> kKeys = {"backfill",
                                                 "backfill_depth",
                                                 "preemption",
                                                 "preempt_grace_s",
                                                 "preempt_restart_cost_s",
                                                 "preempt_protect_after",
                                                 "placement_wait_s",
                                                 "fairshare_max_wait_s",
                                                 "attribution_window_ms",
                                                 "default_time_limit_s",
                                                 "default_checkpoint_interval_s",
                                                 "max_app_failures",
                                                 "restart_backoff_initial_s",
                                                 "restart_backoff_max_s"};
  return kKeys;
}

Status SetLivePolicyKey(std::string_view key, std::string_view value, DaemonConfig& config) {
  const std::vector<std::string>& live = LivePolicyKeys();
  if (std::find(live.begin(), live.end(), key) == live.end()) {
    if (key == "stack" || key == "master_ports") {
      return Status::Error(std::string(key) +
                           " does not change while the daemon runs (the core is built with it): "
                           "start topo-scheduler on a new state directory with it in the config "
                           "file");
    }
    std::string keys;
    for (const std::string& k : live) keys += (keys.empty() ? "" : ", ") + k;
    return Status::Error("\"" + std::string(key.substr(0, 100)) +
                         "\" is not a policy key; keys: " + keys);
  }
  if (value.find_first_of("\n#") != std::string_view::npos) {
    return Status::Error(std::string(key) + ": the value holds a newline or #");
  }
  DaemonConfig next = config;
  auto it = Setters().find(key);
  if (Status s = it->second(Trim(value), next); !s.ok()) {
    return Status::Error(std::string(key) + ": " + s.message());
  }
  // SchedulerConfig() also checks what no single key can (the backoff's cap).
  if (Result<core::SchedulerConfig> sc = next.SchedulerConfig(); !sc.ok()) return sc.status();
  config = std::move(next);
  return Status::Ok();
}

std::string LivePolicyValue(const DaemonConfig& c, std::string_view key) {
  if (key == "backfill") return c.backfill ? "true" : "false";
  if (key == "preemption") return c.preemption ? "true" : "false";
  if (key == "preempt_grace_s") return std::to_string(c.preempt_grace_s);
  if (key == "default_time_limit_s") return std::to_string(c.default_time_limit_s);
  if (key == "default_checkpoint_interval_s") {
    return std::to_string(c.default_checkpoint_interval_s);
  }
  for (const FailureKey& k : kFailureKeys) {
    if (k.key == key) return std::to_string(k.get(c));
  }
  return "";
}

void SyncLivePolicy(const core::SchedulingPolicy& p, DaemonConfig& c) {
  c.backfill = p.backfill;
  c.preemption = p.preemption;
  c.preempt_grace_s = p.preempt_grace / core::kSecond;
  c.preempt_restart_cost_s = p.preempt_restart_cost / core::kSecond;
  c.preempt_protect_after = p.preempt_protect_after;
  c.placement_wait_s = p.placement_wait / core::kSecond;
  c.fairshare_max_wait_s = p.fairshare_max_wait / core::kSecond;
  c.attribution_window_ms = p.attribution_window;
  c.backfill_depth = p.backfill_depth;
  c.default_time_limit_s = p.default_time_limit / core::kSecond;
  c.default_checkpoint_interval_s =
      p.default_checkpoint_interval == core::kNever ? -1 : p.default_checkpoint_interval / 1000;
  c.max_app_failures = p.max_app_failures;
  c.restart_backoff_initial_s = p.restart_backoff_initial / core::kSecond;
  c.restart_backoff_max_s = p.restart_backoff_max / core::kSecond;
}

}  // namespace topo::daemon
