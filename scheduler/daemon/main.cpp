// topo-scheduler: the toposched daemon.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "daemon/loop/core_driver.hpp"
#include "daemon/metrics.hpp"
#include "daemon/net/server.hpp"
#include "daemon/pki/pki.hpp"
#include "daemon/sd_notify.hpp"
#include "daemon/service.hpp"
#include "daemon/slurm/slurm_bridge.hpp"
#include "ha/leadership.hpp"
#include "store/backup.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/topology_source.hpp"
#include "topo/common/version.hpp"

namespace {

using topo::core::Status;
namespace daemon = topo::daemon;

int Fail(const std::string& message) {
  std::cerr << "topo-scheduler: " << message << "\n";
  return 1;
}

// ---- HA (docs/ha.md): the standby phase, the take-over, the lease.
std::atomic<bool> g_stop_waiting = false;
std::atomic<daemon::Server*> g_server = nullptr;

// Waits as a standby until elected, then checks that the replicated log ends
// where this replica's store does and starts the lease's keepalives.
topo::core::Result<std::unique_ptr<topo::ha::Leadership>> BecomeLeader(
    const daemon::DaemonConfig& config) {
  topo::ha::LeadershipOptions o;
  o.etcd.endpoints = config.ha_etcd_endpoints;
  o.etcd.ca_file = config.ha_etcd_ca;
  o.etcd.cert_file = config.ha_etcd_cert;
  o.etcd.key_file = config.ha_etcd_key;
  o.cluster = config.ha_cluster;
  o.ttl_s = config.ha_lease_ttl_s;
  o.max_request_bytes = config.ha_etcd_max_request_bytes;
  o.name = config.ha_name;
  if (o.name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      return Status::Error("ha_name is not set and the host name is unknown; set ha_name");
    }
    o.name = host;
  }
  auto l = topo::ha::Leadership::Create(std::move(o));
  if (!l.ok()) return l.status();
  // SIGTERM/SIGINT while a standby: stop waiting (the server's own handlers
  // take over once it runs).
  std::signal(SIGTERM, [](int) { g_stop_waiting = true; });
  std::signal(SIGINT, [](int) { g_stop_waiting = true; });
  daemon::log::Info("standby: not serving until elected (etcd " +
                    std::to_string(config.ha_etcd_endpoints.size()) + " members, cluster '" +
                    config.ha_cluster + "', name '" + l.value()->options().name + "')");
  // The standby follows the replicated log into its own store between
  // campaigns; the core is rebuilt from the store once elected (Service::Open).
  std::optional<topo::store::Store> store;
  {
    topo::store::OpenOptions options;
    options.accept_data_loss = config.accept_data_loss;
    topo::core::Result<topo::store::Store> opened =
        topo::store::Store::Open(config.state_dir + "/topo.db", options);
    if (!opened.ok()) return opened.status();
    if (const auto& loss = opened.value().accepted_loss()) {
      daemon::log::Warn("store " + opened.value().path() + ": " + loss->message +
                        "; this replica takes them again from the replicated log");
    }
    store.emplace(std::move(opened).value());
  }
  // A store behind the oldest batch left in etcd's log (started empty, or
  // down while the log was trimmed) loads the newest snapshot first.
  auto load_snapshot = [&]() -> Status {
    topo::core::Result<int64_t> loaded = l.value()->LoadSnapshotIfBehind(store, config.state_dir);
    if (!loaded.ok()) return loaded.status();
    if (loaded.value() > 0) {
      daemon::log::Info("loaded the snapshot at seq " + std::to_string(loaded.value()) +
                        " from etcd: this store was behind the replicated log's oldest batch");
    }
    return Status::Ok();
  };
  std::string last_error, last_auth_error;
  // The leader's users and tokens, whenever they changed in etcd.
  auto follow_auth = [&] {
    topo::core::Result<bool> took = l.value()->SyncAuth(*store);
    if (!took.ok()) {
      if (took.message() != last_auth_error) {
        daemon::log::Error("standby: taking the users and tokens: " + took.message());
      }
      last_auth_error = took.message();
      return;
    }
    last_auth_error.clear();
    if (took.value()) daemon::log::Info("standby: took the leader's users and tokens");
  };
  auto follow = [&] {
    Status s = load_snapshot();
    topo::core::Result<int64_t> n = s;
    if (s.ok()) n = l.value()->CatchUp(*store);
    if (!n.ok()) {
      if (n.message() != last_error)
        daemon::log::Error("standby: following the log: " + n.message());
      last_error = n.message();
      return;
    }
    last_error.clear();
    if (n.value() > 0) {
      daemon::log::Info("standby: applied " + std::to_string(n.value()) +
                        " logged events; the store is at seq " + std::to_string(store->LastSeq()));
    }
    follow_auth();
    if (Status r = l.value()->ReportApplied(store->LastSeq()); !r.ok()) {
      daemon::log::Warn("standby: cannot report its applied seq to etcd: " + r.message());
    }
  };
  follow();
  if (Status s = l.value()->WaitToLead([](const std::string& line) { daemon::log::Info(line); },
                                       g_stop_waiting, follow);
      !s.ok()) {
    return s;
  }
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  l.value()->StopReporting();
  // The lease is kept alive from here on: catching up (a snapshot download
  // included) may outlast a TTL. Losing it meanwhile fails the take-over.
  l.value()->StartRenewing([](const std::string& why) {
    const Status lost =
        Status::Error("lost the leadership (" + why + "); exiting, to restart as a standby",
                      topo::core::ErrorCode::kUnavailable);
    daemon::log::Error(lost.message());
    if (daemon::Server* server = g_server.load(); server != nullptr) server->Shutdown(lost);
  });
  // Elected: everything the log holds, up to head, before leading.
  Status loaded = load_snapshot();
  topo::core::Result<int64_t> caught_up = loaded;
  if (loaded.ok()) caught_up = l.value()->CatchUp(*store);
  if (!caught_up.ok()) {
    (void)l.value()->Resign();
    return Status::Error("catching up with the replicated log: " + caught_up.message());
  }
  const int64_t last_seq = store->LastSeq();
  daemon::log::Info("caught up with the replicated log at seq " + std::to_string(last_seq));
  if (Status s = l.value()->TakeOver(last_seq); !s.ok()) {
    (void)l.value()->Resign();  // let another replica lead at once
    return s;
  }
  // The users and tokens as the last leader left them (a fresh cluster has
  // none in etcd yet: this leader publishes its own once it has opened).
  if (topo::core::Result<bool> took = l.value()->SyncAuth(*store); !took.ok()) {
    (void)l.value()->Resign();
    return Status::Error("taking the users and tokens from etcd: " + took.message());
  }
  return l;
}

Status MakeStateDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create state directory " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  return Status::Ok();
}

// Holds an exclusive lock on DIR/lock for the life of the process: one
// daemon per state directory.
Status LockStateDir(const std::string& dir) {
  const std::string path = dir + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    (void)!::read(fd, pid, sizeof pid - 1);
    return Status::Error("another topo-scheduler (pid " + std::string(pid) +
                         ") is using state directory " + dir + "; stop it or use --state-dir");
  }
  const std::string me = std::to_string(::getpid());
  (void)!::ftruncate(fd, 0);
  (void)!::pwrite(fd, me.data(), me.size(), 0);
  return Status::Ok();  // fd stays open: the lock lives as long as the process
}

// `restore`'s check, before it says "Restored": the rebuild a start does
// (CoreDriver::LoadFromStore), on the checked copy of the backup.
topo::core::Result<std::string> RebuildForRestore(const daemon::DaemonConfig& config,
                                                  const std::string& path) {
  topo::store::OpenOptions options;
  options.commit_mark = false;  // a scratch copy; restore writes the mark
  topo::core::Result<topo::store::Store> opened = topo::store::Store::Open(path, options);
  if (!opened.ok()) return opened.status();
  daemon::CoreDriver driver(nullptr);
  driver.AttachStore(std::make_unique<topo::store::Store>(std::move(opened).value()), 0);
  daemon::DaemonConfig c = config;
  if (Status s = driver.LoadFromStore(c); !s.ok()) return s;
  if (driver.core() == nullptr) return std::string("no topology yet, so no scheduler to rebuild");
  const topo::store::ReplayReport& replay = driver.replay();
  std::string done = driver.restored_seq() > 0
                         ? "rebuilt the scheduler from the snapshot at seq " +
                               std::to_string(driver.restored_seq()) + " and the " +
                               std::to_string(replay.events) + " events after it"
                         : "rebuilt the scheduler by replaying " + std::to_string(replay.events) +
                               " events from seq " + std::to_string(driver.epoch_from_seq());
  if (replay.diverged > 0) {
    done += " (" + std::to_string(replay.diverged) +
            " decided differently by this build, first at seq " +
            std::to_string(replay.first_diverged_seq) + ")";
  }
  return done + ", as a start does";
}

// What a state directory needs beside the store that a backup does not
// hold (docs/operations.md, What the state directory holds): the files
// `restore` warns about when they are missing.
std::vector<std::pair<std::string, std::string>> MissingBesideStore(const std::string& dir) {
  const std::pair<const char*, const char*> needed[] = {
      {"ca.pem", "the CA: without it the daemon makes a new one, which no agent or client trusts"},
      {"ca-key.pem", "the CA's key: without it the daemon makes a new CA"},
      {"server.pem", "the server certificate (made again from the CA if missing)"},
      {"server-key.pem", "its key (made again from the CA if missing)"},
      {"pki/issued.tsv",
       "the node certificates issued: without it crl.pem is rebuilt empty and revoked nodes are "
       "let in again"},
      {"pki/revoked-nodes.tsv", "each revoked node's revocation time"},
      {"crl.pem", "the revoked node certificates (rebuilt from pki/issued.tsv if missing)"},
      {"admin-token",
       "user admin's token: its hash is in the store, so the old token still works, but local "
       "`topo` and token_file settings read this file"},
  };
  std::vector<std::pair<std::string, std::string>> missing;
  for (const auto& [name, why] : needed) {
    if (!std::filesystem::exists(dir + "/" + name)) missing.emplace_back(name, why);
  }
  return missing;
}

// `ca issue` and `ca renew`: sign, record, write DIR/NODE.pem and
// DIR/NODE-key.pem, say what was written.
int IssueNode(const daemon::PkiPaths& pki, const std::string& node, const std::string& out_dir,
              int days, bool revoke_old, bool renew) {
  if (Status s = daemon::CheckNodeName(node); !s.ok()) return Fail(s.message());
  const std::string dir = out_dir.empty() ? "." : out_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Fail("--out " + dir + ": " + ec.message());
  topo::core::Result<daemon::CertIndex> before = daemon::ReadCertIndex(pki);
  if (!before.ok()) return Fail(before.message());
  const std::string cert = dir + "/" + node + ".pem", key = dir + "/" + node + "-key.pem";
  const int64_t now = ::time(nullptr);
  topo::core::Result<daemon::IssuedCert> issued =
      daemon::IssueNodeCertificate(pki, node, days, cert, key, now, revoke_old);
  if (!issued.ok()) return Fail(issued.message());
  std::cout << "wrote " << cert << " and " << key << " (CA " << pki.ca_cert << ")\n"
            << "serial " << issued.value().serial << ", valid until "
            << daemon::FormatUtc(issued.value().not_after) << " (" << days << " days); recorded in "
            << pki.issued_index << "\n";
  if (renew) {
    int earlier = 0, revoked = 0;
    for (const daemon::IssuedCert& c : before.value().issued) {
      if (c.node != node) continue;
      ++earlier;
      if (revoke_old && c.revoked_at == 0) ++revoked;
    }
    std::cout << "node " << node << " had " << earlier << " earlier certificate(s)";
    if (revoke_old) {
      std::cout << "; revoked " << revoked << " of them now (" << pki.crl
                << "): the running daemon refuses them at the next handshake";
    } else if (earlier > 0) {
      std::cout << "; they stay valid until they expire (--revoke-old revokes them)";
    }
    std::cout << "\n";
  }
  std::cout << "install both on the node and restart topo-agent (--cert " << cert << " --key "
            << key << ")\n";
  return 0;
}

int RevokeNode(const daemon::PkiPaths& pki, const std::string& node) {
  topo::core::Result<daemon::RevokeReport> r = daemon::RevokeNode(pki, node, ::time(nullptr));
  if (!r.ok()) return Fail(r.message());
  std::cout << "revoked " << r.value().revoked.size() << " certificate(s) of node " << node;
  for (const daemon::IssuedCert& c : r.value().revoked) {
    std::cout << (&c == &r.value().revoked.front() ? ": " : ", ") << c.serial;
  }
  std::cout << "\nwrote " << pki.crl << "; any other certificate for " << node
            << " with notBefore before " << daemon::FormatUtc(r.value().revoked_at)
            << " is refused too.\nA running topo-scheduler refuses them at the next TLS "
               "handshake and closes the node's connection within a second.\n"
            << "New certificate: topo-scheduler ca renew --node " << node << " --out DIR\n";
  return 0;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "topo-scheduler - the toposched daemon: topology-aware gang scheduling over an HTTPS API.\n\n"
      "With no configuration it keeps its state in ~/.local/share/toposched (a SQLite file, a\n"
      "CA and server certificate it creates on first start, and the first admin token, printed\n"
      "once and saved to STATE_DIR/admin-token) and listens on https://127.0.0.1:8443.\n\n"
      "Examples:\n"
      "  topo-scheduler\n"
      "  topo-scheduler --state-dir /var/lib/toposched --listen 0.0.0.0:8443\n"
      "  topo-scheduler --config /etc/toposched/topo-scheduler.conf\n"
      "  topo-scheduler ca issue --node n17 --out /etc/toposched/agent\n"
      "  topo-scheduler ca revoke --node n17 --state-dir /var/lib/toposched\n",
      "topo-scheduler"};
  // --state-dir and --config also after `ca ...`, where people type them.
  app.fallthrough();
  app.set_version_flag("--version", std::string("topo-scheduler ") + topo::kVersion);
  std::string config_file, state_dir, listen;
  app.add_option("--config", config_file, "settings file (packaging/topo-scheduler.conf)")
      ->check(CLI::ExistingFile);
  app.add_option("--state-dir", state_dir,
                 "state directory (default $TOPO_STATE_DIR, else ~/.local/share/toposched)");
  app.add_option("--listen", listen, "HOST:PORT to serve HTTPS on (default 127.0.0.1:8443)");
  bool accept_data_loss = false;
  app.add_flag("--accept-data-loss", accept_data_loss,
               "start on a store whose log ends before its commit mark (events acknowledged "
               "but lost: docs/store.md, The commit mark), and reset the mark to it; for this "
               "start only");

  CLI::App* ca = app.add_subcommand("ca", "the daemon's certificate authority");
  ca->footer(
      "Node certificates (docs/daemon.md, Certificates) live agent_cert_days (90) unless --days\n"
      "says otherwise; each is recorded in STATE_DIR/pki/issued.tsv. `revoke` writes\n"
      "STATE_DIR/crl.pem; the running daemon refuses a revoked certificate at the next TLS\n"
      "handshake and closes the node's open connection, no restart needed.\n\n"
      "Examples:\n"
      "  topo-scheduler ca issue --node n17 --out /etc/toposched/agent\n"
      "  topo-scheduler ca issue --node n17 --out certs --days 30\n"
      "  topo-scheduler ca renew --node n17 --out /etc/toposched/agent --revoke-old\n"
      "  topo-scheduler ca revoke --node n17 --state-dir /var/lib/toposched\n"
      "  openssl crl -in /var/lib/toposched/crl.pem -noout -text    # what is revoked");
  std::string node, out_dir;
  int days = 0;
  bool revoke_old = false;
  CLI::App* issue = ca->add_subcommand("issue", "sign a client certificate for a node's agent");
  issue->add_option("--node", node, "node name (the certificate's CN)")->required();
  issue->add_option("--out", out_dir, "directory for NODE.pem and NODE-key.pem (default .)");
  issue->add_option("--days", days, "lifetime in days (default: agent_cert_days, 90)")
      ->check(CLI::Range(1, 3650));
  CLI::App* renew = ca->add_subcommand(
      "renew", "sign a fresh certificate (new key, new serial) for a node, written like issue");
  renew->add_option("--node", node, "node name (the certificate's CN)")->required();
  renew->add_option("--out", out_dir, "directory for NODE.pem and NODE-key.pem (default .)");
  renew->add_option("--days", days, "lifetime in days (default: agent_cert_days, 90)")
      ->check(CLI::Range(1, 3650));
  renew->add_flag("--revoke-old", revoke_old, "also revoke the node's earlier certificates");
  CLI::App* revoke = ca->add_subcommand(
      "revoke", "revoke every certificate issued for a node (writes STATE_DIR/crl.pem)");
  revoke->add_option("--node", node, "node name")->required();
  ca->require_subcommand(1);

  std::string backup_out, restore_file;
  bool restore_force = false;
  CLI::App* backup = app.add_subcommand(
      "backup",
      "copy the store (jobs, events, users, tokens, topology) into a new file while the daemon "
      "runs");
  backup->footer(
      "A consistent copy as of one committed transaction (SQLite's online backup API); the\n"
      "daemon keeps serving. The file (mode 0600) holds token hashes and job commands: keep it\n"
      "as safe as the state directory. The CA and certificates (STATE_DIR/*.pem, pki/) are\n"
      "not in it: back them up once (docs/operations.md).\n\n"
      "Examples:\n"
      "  topo-scheduler backup --out /backup/topo-$(date +%F).db --state-dir /var/lib/toposched\n"
      "  topo-scheduler restore /backup/topo-2026-11-23.db --state-dir /var/lib/toposched-new");
  backup->add_option("--out", backup_out, "the backup file to create (never overwritten)")
      ->required();
  CLI::App* restore = app.add_subcommand(
      "restore", "put a backup in place as the store of a state directory (daemon stopped)");
  restore->footer(
      "Nothing in the state directory changes until a copy of FILE passed every check: SQLite's\n"
      "integrity check, a schema version this release knows, and the scheduler rebuilt from it\n"
      "as a start does (its snapshot and the events after it, which must follow each other\n"
      "without a gap and read back). A bad backup is refused, naming the seq at fault. The\n"
      "restored store gets a commit mark at its last event (docs/store.md). The CA, pki/ and\n"
      "admin-token are not in a backup: restore warns about each one the directory lacks; copy\n"
      "them from the old state directory before the first start (docs/operations.md, Restore).\n\n"
      "Example:\n"
      "  topo-scheduler restore /backup/topo-2026-11-23.db --state-dir /var/lib/toposched-new");
  restore->add_option("FILE", restore_file, "a file written by topo-scheduler backup")->required();
  restore->add_flag("--force", restore_force,
                    "replace the store the state directory already holds");

  CLI11_PARSE(app, argc, argv);

  daemon::DaemonConfig config;
  if (!config_file.empty()) {
    if (Status s = daemon::ApplyConfigFile(config_file, config); !s.ok()) return Fail(s.message());
  }
  if (!state_dir.empty()) config.state_dir = state_dir;
  config.accept_data_loss = accept_data_loss;
  if (config.state_dir.empty()) config.state_dir = daemon::DefaultStateDir();
  if (Status s = daemon::log::Init(config.log_level, config.log_format); !s.ok()) {
    return Fail(s.message());
  }
  if (!listen.empty()) {
    if (Status s = daemon::ParseListen(listen, config); !s.ok()) return Fail(s.message());
  }
  if (*backup) {
    topo::core::Result<topo::store::BackupInfo> b =
        topo::store::BackupStore(config.state_dir + "/topo.db", backup_out);
    if (!b.ok()) return Fail(b.message());
    std::cout << "Backed up " << b.value().jobs << " jobs and " << b.value().events
              << " events (schema version " << b.value().schema_version << ") to " << backup_out
              << "\n";
    return 0;
  }
  if (*restore) {
    if (Status s = MakeStateDir(config.state_dir); !s.ok()) return Fail(s.message());
    if (Status s = LockStateDir(config.state_dir); !s.ok()) return Fail(s.message());
    topo::core::Result<topo::store::BackupInfo> r = topo::store::RestoreStore(
        restore_file, config.state_dir, restore_force,
        [&config](const std::string& path) { return RebuildForRestore(config, path); });
    if (!r.ok()) return Fail(r.message());
    std::cout << "Restored " << r.value().jobs << " jobs and " << r.value().events
              << " events (log up to seq " << r.value().last_seq << "; " << r.value().checked
              << ") into " << config.state_dir << "\n";
    const auto missing = MissingBesideStore(config.state_dir);
    for (const auto& [name, why] : missing) {
      std::cerr << "topo-scheduler: warning: " << config.state_dir << "/" << name
                << " is missing: " << why << "\n";
    }
    if (!missing.empty()) {
      std::cerr << "topo-scheduler: copy them from the old state directory (or your copy of "
                   "it) before the first start: docs/operations.md, Restore\n";
    }
    return 0;
  }
  if ((*revoke || *renew) && !std::filesystem::exists(config.state_dir + "/ca.pem")) {
    // Would make a new CA that no agent trusts: a mistyped --state-dir.
    return Fail("no CA in " + config.state_dir + " (ca.pem): give the daemon's --state-dir (or " +
                "--config with its state_dir)");
  }
  if (Status s = MakeStateDir(config.state_dir); !s.ok()) return Fail(s.message());
  topo::core::Result<daemon::PkiPaths> pki =
      daemon::EnsurePki(config.state_dir, config.server_names);
  if (!pki.ok()) return Fail(pki.message());

  if (*issue || *renew) {
    return IssueNode(pki.value(), node, out_dir, days > 0 ? days : config.agent_cert_days,
                     revoke_old, renew->parsed());
  }
  if (*revoke) return RevokeNode(pki.value(), node);

  if (Status s = LockStateDir(config.state_dir); !s.ok()) return Fail(s.message());
  std::unique_ptr<topo::ha::Leadership> leadership;
  daemon::ReplicateBatch replicate;
  daemon::ReplicateEpoch replicate_epoch;
  if (config.ha_enabled()) {
    auto l = BecomeLeader(config);
    if (!l.ok() && g_stop_waiting.load()) {
      daemon::log::Info("standby: stopped by a signal");
      return 0;
    }
    if (!l.ok()) return Fail("HA: " + l.message());
    leadership = std::move(l).value();
    replicate = [l = leadership.get()](int64_t first_seq,
                                       std::span<const topo::store::LogEntry> batch,
                                       const topo::core::Topology& topology) {
      return l->Append(first_seq, batch, topology);
    };
    replicate_epoch = [l = leadership.get()](
                          int64_t from_seq,
                          std::span<const std::pair<std::string, std::string>> meta) {
      return l->AppendEpoch(from_seq, meta);
    };
  }
  daemon::Metrics metrics;
  topo::core::Result<std::unique_ptr<daemon::Service>> service = daemon::Service::Open(
      config, &metrics, NowMs(), std::move(replicate), std::move(replicate_epoch));
  if (!service.ok()) return Fail(service.message());
  if (leadership) {
    service.value()->SetLeadershipTerm(leadership->term());
    service.value()->SetAuthReplication(
        [l = leadership.get()](const std::string& value) { return l->PublishAuth(value); });
    // What it took from etcd, or its own on a fresh cluster, plus the admin
    // Open creates when no user is left: every replica then has the same.
    if (Status s = service.value()->PublishAuthNow(); !s.ok()) {
      return Fail("HA: publishing the users and tokens to etcd: " + s.message());
    }
    // Each local snapshot is published to etcd off the strand, which also
    // trims the replicated log (docs/ha.md, Snapshots bound the log in etcd).
    leadership->StartPublishing(config.state_dir + "/topo.db", config.state_dir,
                                [](const std::string& line) { daemon::log::Info("HA: " + line); });
    service.value()->OnSnapshotWritten([l = leadership.get()] { l->SnapshotWritten(); });
  }
  const daemon::Service& svc = *service.value();
  if (svc.first_admin_token()) {
    const std::string path = config.state_dir + "/admin-token";
    if (Status s = daemon::WriteFileAtomic(path, *svc.first_admin_token() + "\n", 0600); !s.ok()) {
      return Fail(s.message());
    }
    std::cout << "First start: created user admin (cluster-admin). Its token, shown once, is\n  "
              << *svc.first_admin_token() << "\nand is saved in " << path << " (mode 0600).\n";
  }
  if (svc.replay_report().events > 0 || svc.restored_seq() > 0) {
    std::cerr << "topo-scheduler: rebuilt the scheduler from ";
    if (svc.restored_seq() > 0)
      std::cerr << "the snapshot at seq " << svc.restored_seq() << " and ";
    std::cerr << svc.replay_report().events << " logged events";
    if (svc.replay_report().diverged > 0) {
      std::cerr << " (" << svc.replay_report().diverged
                << " decided differently by this build, first at seq "
                << svc.replay_report().first_diverged_seq << ")";
    }
    std::cerr << "\n";
  }

  if (!config.slurm_topology.empty()) {
    topo::core::Result<std::string> text = topo::common::ReadFile(config.slurm_topology);
    if (!text.ok()) return Fail("slurm_topology: " + text.message());
    const std::string& path = config.slurm_topology;
    if (path.ends_with(".yaml") || path.ends_with(".yml")) {
      // Slurm 25.05's topology.yaml: its tree and blocks as topology.conf.
      text = topo::common::SlurmTopologyYamlToConf(text.value());
      if (!text.ok()) return Fail("slurm_topology " + path + ": " + text.message());
    }
    if (Status s =
            service.value()->SlurmImportTopology(text.value(), config.slurm_gpus_per_node, NowMs());
        !s.ok()) {
      if (!svc.has_topology()) return Fail(s.message());
      std::cerr << "topo-scheduler: " << s.message() << "; keeping the stored topology\n";
    }
  }
  if (config.agent_listen_port < 0) {
    config.agent_listen_host = config.listen_host;
    config.agent_listen_port = config.listen_port == 0 ? 0 : config.listen_port + 1;
  }
  daemon::Server server(config, *service.value(), metrics);
  g_server = &server;
  if (leadership != nullptr && leadership->lost()) {
    return Fail("HA: lost the leadership while starting (" + leadership->lost_reason() + ")");
  }
  const std::string cert = config.tls_cert.empty() ? pki.value().server_cert : config.tls_cert;
  const std::string key = config.tls_key.empty() ? pki.value().server_key : config.tls_key;
  if (Status s = server.Listen(cert, key); !s.ok()) return Fail(s.message());
  const std::string host = config.listen_host.find(':') != std::string::npos
                               ? "[" + config.listen_host + "]"
                               : config.listen_host;
  const std::string url = "https://" + host + ":" + std::to_string(server.port());
  // Both listeners are bound before either endpoint file is written, so a
  // client (or test) that saw `endpoint` appear can reach the agent port too.
  if (config.agent_listen_host != "off") {
    if (Status s = server.ListenAgents(cert, key, pki.value().ca_cert); !s.ok()) {
      return Fail(s.message());
    }
  }
  // The endpoint files only help local clients find the daemon: on a full
  // disk it still starts and serves reads (docs/daemon.md).
  if (Status s = daemon::WriteFileAtomic(config.state_dir + "/endpoint", url + "\n", 0644);
      !s.ok()) {
    std::cerr << "topo-scheduler: warning: " << s.message() << "\n";
  }
  if (config.agent_listen_host != "off") {
    const std::string agent_url = "wss://" + config.agent_listen_host + ":" +
                                  std::to_string(server.agent_port()) + "/v1/agent";
    if (Status s =
            daemon::WriteFileAtomic(config.state_dir + "/agent-endpoint", agent_url + "\n", 0644);
        !s.ok()) {
      std::cerr << "topo-scheduler: warning: " << s.message() << "\n";
    }
    std::cout << "Agents (mutual TLS): " << agent_url << "\n";
  }
  std::cout << "topo-scheduler listening on " << url << " (CA " << pki.value().ca_cert << ", state "
            << config.state_dir << ")\n";
  if (!svc.has_topology()) {
    std::cout << "No topology yet: import one with `topo topology import FILE`.\n";
  }
  std::cout << "Dashboard: " << url << "/#token=<your token>" << std::endl;
  // Slurm mode (docs/slurm.md): the plugin's socket and the scontrol poller.
  std::unique_ptr<daemon::SlurmBridge> slurm;
  if (!config.slurm_socket.empty()) {
    daemon::Service& svc = *service.value();
    daemon::SlurmCalls calls{
        [&svc](const topo::api::SlurmSubmitLine& line, const std::string& user,
               topo::core::TimeMs now) { return svc.SlurmRequest(line, user, now); },
        [&svc](const daemon::SlurmSnapshot& snapshot, topo::core::TimeMs now) {
          return svc.SlurmSync(snapshot, now);
        }};
    slurm = std::make_unique<daemon::SlurmBridge>(
        config, std::move(calls),
        [&server](auto work, auto done) { server.Post(std::move(work), std::move(done)); });
    if (Status s = slurm->Start(); !s.ok()) return Fail(s.message());
  }
  // Type=notify (packaging/systemd/topo-scheduler.service): ready once every
  // listener accepts and the endpoint files are written, so what is ordered
  // after the unit finds the API up.
  if (Status s = daemon::NotifyServiceManager("READY=1\nSTATUS=serving " + url); !s.ok()) {
    std::cerr << "topo-scheduler: warning: " << s.message() << "\n";
  }
  Status run = server.Run();
  g_server = nullptr;
  if (slurm != nullptr) slurm->Stop();
  if (!run.ok()) return Fail(run.message());
  if (leadership != nullptr && !leadership->lost()) {
    // A clean stop hands over at once instead of after the lease's TTL.
    if (Status s = leadership->Resign(); !s.ok()) {
      daemon::log::Warn("HA: resigning failed (" + s.message() + "); a standby takes over when " +
                        "the lease expires");
    }
  }
  return 0;
}
