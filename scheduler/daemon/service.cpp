// Service: open and rebuild, dispatch, authentication, group commit, ticks.

#include "daemon/service.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "daemon/api/route.hpp"
#include "daemon/api/routes.hpp"
#include "daemon/log.hpp"
#include "daemon/service_state.hpp"
#include "daemon/slurm/slurm_service.hpp"
#include "topo/common/base64.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/strict_json.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/topology_source.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;
using core::TimeMs;

void ServiceState::Audit(const Caller& caller, std::string_view action, const Json& detail) const {
  (void)driver.store().AppendAudit(driver.now(), Actor(caller), action, detail.dump());
}

// ---------------------------------------------------------------- Service

Service::Service(std::unique_ptr<ServiceState> state) : s_(std::move(state)) {}
Service::~Service() = default;

const std::optional<std::string>& Service::first_admin_token() const {
  return s_->first_admin_token;
}
const store::ReplayReport& Service::replay_report() const { return s_->driver.replay(); }
int64_t Service::restored_seq() const { return s_->driver.restored_seq(); }
bool Service::has_topology() const { return s_->driver.topology() != nullptr; }
size_t Service::staged() const { return s_->driver.staged(); }

namespace {

// The registry's view of the daemon: the core, the store, the log.
class ServiceAgentHost : public AgentHost {
 public:
  explicit ServiceAgentHost(ServiceState& s) : s_(s) {}
  const core::SchedulerCore* core() const override { return s_.driver.core(); }
  const core::Topology* topology() const override { return s_.driver.topology(); }
  void StepCore(const core::Event& event, const std::string& actor) override {
    s_.driver.Step(event, actor);
  }
  bool JobEnded(core::JobId id) override { return s_.driver.JobTenant(id).has_value(); }
  void Audit(const std::string& actor, std::string_view action, const Json& detail) override {
    (void)s_.driver.store().AppendAudit(s_.driver.now(), actor, action, detail.dump());
  }
  std::string UnixUserOf(const std::string& api_user) override {
    Result<std::optional<store::User>> u = s_.driver.store().GetUser(api_user);
    if (!u.ok() || !u.value()) return api_user;
    return u.value()->unix_user.empty() ? api_user : u.value()->unix_user;
  }

 private:
  ServiceState& s_;
};

}  // namespace

Result<std::unique_ptr<Service>> Service::Open(const DaemonConfig& config, Metrics* metrics,
                                               TimeMs now, ReplicateBatch replicate,
                                               ReplicateEpoch replicate_epoch) {
  auto s = std::make_unique<ServiceState>(config, metrics);
  s->driver.SetReplication(std::move(replicate), std::move(replicate_epoch));
  s->agent_host = std::make_unique<ServiceAgentHost>(*s);
  AgentSettings agent_settings;
  agent_settings.heartbeat_interval_ms = config.heartbeat_interval_ms;
  agent_settings.missed_heartbeats_down = config.missed_heartbeats_down;
  agent_settings.send_jobs = config.slurm_socket.empty();
  agent_settings.restart_grace_ms = config.agent_restart_grace_ms;
  agent_settings.start_ack_timeout_ms = config.start_ack_timeout_s * core::kSecond;
  s->agents = std::make_unique<AgentRegistry>(*s->agent_host, agent_settings);
  store::OpenOptions open_options;
  open_options.accept_data_loss = config.accept_data_loss;
  Result<store::Store> opened = store::Store::Open(config.state_dir + "/topo.db", open_options);
  if (!opened.ok()) return opened.status();
  if (const std::optional<store::DataLoss>& loss = opened.value().accepted_loss()) {
    log::Warn("store " + opened.value().path() + ": " + loss->message,
              {{"store_seq", loss->store_seq}, {"mark_seq", loss->mark_seq}});
  }
  s->reads = std::make_unique<ReadPool>(config.state_dir + "/topo.db",
                                        static_cast<size_t>(config.read_threads));
  s->driver.AttachStore(std::make_unique<store::Store>(std::move(opened).value()), now);
  store::Store& st = s->driver.store();

  // A store without a policy takes the config file's, recorded for later
  // starts; LoadFromStore then rebuilds the core as every start does.
  Result<std::optional<std::string>> policy = st.GetMeta("policy");
  if (!policy.ok()) return policy.status();
  if (!policy.value()) {
    if (Status p = st.SetMeta("policy", PolicyJson(s->config)); !p.ok()) return p;
  }
  if (Status r = s->driver.LoadFromStore(s->config); !r.ok()) return r;
  if (s->driver.topology() != nullptr) {
    // Policy changes in the log are the policy now.
    SyncLivePolicy(core::SchedulingPolicy::Of(s->driver.core()->config()), s->config);
    s->driver.SetSchedulerConfig(s->driver.core()->config());
    s->driver.RecountWaiting();
    // Tenants the log of this topology does not configure yet (an import
    // that crashed before its first batch): configure them again.
    Result<std::vector<core::TenantConfig>> tenants = st.ListTenants();
    if (!tenants.ok()) return tenants.status();
    for (const core::TenantConfig& t : tenants.value()) {
      const core::TenantConfig* have = s->driver.core()->tenant(t.name);
      const bool same =
          have != nullptr && common::TenantConfigToJson(*have) == common::TenantConfigToJson(t);
      if (!same) s->driver.Step(core::TenantConfigured{t}, "scheduler");
    }
    Result<std::vector<store::NodeRow>> nodes = st.ListNodes();
    if (!nodes.ok()) return nodes.status();
    for (const store::NodeRow& n : nodes.value()) s->driver.SetNodeReason(n.name, n.reason);
    // Every node that is not down must prove it has an agent: the agents,
    // retrying with backoff meanwhile, get kAgentReconnectGraceMs to
    // reconnect (the heartbeat limit when that is longer); the nodes whose
    // agents do not come back go down and their jobs are recovered, whoever
    // brought them up (an admin's resume too). In Slurm mode slurmd runs the
    // jobs and Slurm says which nodes are up: only the nodes an agent brought
    // up are watched (heartbeats are not logged, so the node's last reason
    // says who did).
    std::vector<std::string> agent_nodes;
    const core::Topology& topo = *s->driver.topology();
    for (core::NodeId id = 0; id < topo.node_count(); ++id) {
      if (s->driver.core()->cluster().node_state(id) == core::NodeState::kDown) continue;
      const std::string& name = topo.node(id).name;
      const std::string& reason = s->driver.NodeReason(name);
      // "agent disconnected": suspect when the daemon stopped (its agent's
      // connection had closed); it too must come back or go down.
      if (agent_settings.send_jobs || reason == "agent registered" ||
          reason == "heartbeat resumed" || reason == "agent disconnected") {
        agent_nodes.push_back(name);
      }
    }
    s->agents->Restore(agent_nodes, ServiceState::kAgentReconnectGraceMs, s->driver.now());
  }
  Result<core::JobId> max_id = st.MaxJobId();
  if (!max_id.ok()) return max_id.status();
  s->driver.SetNextJobId(max_id.value() + 1);

  Result<std::vector<store::User>> users = st.ListUsers();
  if (!users.ok()) return users.status();
  if (users.value().empty()) {
    store::User admin{"admin", "default", store::Role::kClusterAdmin, s->driver.now(), "admin"};
    if (Status u = st.CreateUser(admin); !u.ok()) return u;
    // HA: every replica is given the same admin token file, so a failover
    // keeps the token (docs/ha.md, Not in the log).
    const std::string token_file = config.state_dir + "/admin-token";
    std::optional<std::string> given;
    if (config.ha_enabled() && std::filesystem::exists(token_file)) {
      Result<std::string> text = common::ReadFile(token_file);
      if (!text.ok()) return text.status();
      std::string t = text.value();
      while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
      given = t;
    }
    Result<store::IssuedToken> token =
        given ? st.CreateTokenFromText("admin", *given, s->driver.now())
              : st.CreateToken("admin", s->driver.now());
    if (!token.ok()) {
      if (given) return Status::Error(token_file + ": " + token.message());
      return token.status();
    }
    if (!given) s->first_admin_token = token.value().token;
    (void)st.AppendAudit(s->driver.now(), "scheduler", "user.create",
                         Json{{"user", "admin"}, {"role", "cluster-admin"}}.dump());
  }
  auto service = std::unique_ptr<Service>(new Service(std::move(s)));
  if (Status c = service->Commit(); !c.ok()) return c;
  return service;
}

Status Service::Commit() { return s_->Commit(); }

HttpResponse Service::Handle(const HttpRequest& request, TimeMs now) {
  return ServeRequest(*s_, request, now);
}

bool Service::ServedOffStrand(const HttpRequest& request) const { return IsOffStrand(request); }

HttpResponse Service::HandleRead(const HttpRequest& request, TimeMs now) {
  return ServeOffStrand(*s_, request, now);
}

std::string Service::SlurmRequest(std::string_view line, const std::string& user, TimeMs now) {
  return daemon::SlurmRequest(*s_, line, user, now);
}

std::string Service::SlurmRequest(const api::SlurmSubmitLine& line, const std::string& user,
                                  TimeMs now) {
  return daemon::SlurmRequest(*s_, line, user, now);
}

std::vector<SlurmAction> Service::SlurmSync(const SlurmSnapshot& snapshot, TimeMs now) {
  return daemon::SlurmSync(*s_, snapshot, now);
}

Status Service::SlurmImportTopology(const std::string& text, int gpus_per_node, TimeMs now) {
  return daemon::SlurmImportTopology(*s_, text, gpus_per_node, now);
}

void Service::SetLeadershipTerm(int64_t term) { s_->agents->SetTerm(term); }

void Service::SetAuthReplication(std::function<Status(const std::string&)> publish) {
  s_->driver.SetAuthReplication(std::move(publish));
}

Status Service::PublishAuthNow() { return s_->driver.PublishAuth(); }

void Service::OnSnapshotWritten(std::function<void()> hook) {
  s_->driver.OnSnapshotWritten(std::move(hook));
}

Status ServiceState::Commit() {
  Result<std::vector<store::LogEntry>> done = driver.Commit();
  if (!done.ok()) return done.status();
  if (!done.value().empty()) {
    if (Status s = driver.MaybeSnapshot(config.snapshot_every_events,
                                        config.snapshot_every_minutes * 60000);
        !s.ok()) {
      log::Warn("snapshot not written: " + s.message() + "; the log has every event");
    }
  }
  for (const store::LogEntry& e : done.value()) {
    agents->Dispatch(e.commands, driver.now());
    if (driver.topology() == nullptr) continue;
    for (const core::Command& c : e.commands) {
      for (const log::Record& r : log::Describe(c, *driver.topology())) {
        log::Write(r.level, r.message, r.fields);
      }
    }
  }
  return Status::Ok();
}

namespace {

// A store failure as the API answers one (503, or 507 when the disk is full).
Status StoreError(const Status& s) {
  return Status::Error(
      "the store failed: " + s.message(),
      s.code() == core::ErrorCode::kInsufficientStorage ? s.code() : core::ErrorCode::kUnavailable);
}

}  // namespace

Status ServiceState::ImportTopology(std::unique_ptr<core::Topology> topology,
                                    const std::string& actor) {
  // With a core, the new topology is a change under running jobs: the
  // core's state (jobs, queue, quotas, fairshare, node states) is carried
  // onto it, unless a job holds a node the change removes.
  std::unique_ptr<core::SchedulerCore> carried;
  std::string base;
  if (driver.core() != nullptr) {
    // Write what the old topology's core staged, then start the new epoch.
    if (Status c = Commit(); !c.ok()) return StoreError(c);
    Result<std::string> onto = driver.core()->SnapshotOnto(*topology);
    if (!onto.ok()) return onto.status();
    carried = std::make_unique<core::SchedulerCore>(*topology, driver.scheduler_config());
    if (Status r = carried->Restore(onto.value()); !r.ok()) {
      return Status::Error("the scheduler's state does not carry over to the new topology (" +
                               r.message() + "); nothing changed",
                           core::ErrorCode::kInternal);
    }
    base = common::Base64Encode(onto.value());
  }
  store::Store& st = driver.store();
  auto next = std::move(topology);
  const std::pair<std::string, std::string> meta[] = {
      {"topology", common::TopologyToJson(*next)},
      {"topology_from_seq", std::to_string(st.LastSeq() + 1)},
      // The state the epoch starts from: empty for a first import.
      {"topology_base", base},
      // The policy as of this epoch's first event: a restart replays only
      // this epoch, with live changes made before it already in effect.
      {"policy", PolicyJson(config)}};
  if (Status r = driver.ReplicateImport(st.LastSeq() + 1, meta); !r.ok()) {
    return Status::Error("the topology was not imported: " + r.message(),
                         core::ErrorCode::kUnavailable);
  }
  if (Status w = st.SetMetas(meta); !w.ok()) {
    if (driver.replicated()) {
      driver.MarkDiverged(
          Status::Error("the replicated log holds a topology import this store could not write (" +
                            w.message() + "); stopping, to catch up as a standby",
                        core::ErrorCode::kUnavailable));
    }
    return StoreError(w);
  }
  const bool first = carried == nullptr;
  driver.StartEpoch(std::move(next), std::move(carried));
  if (!first) return Status::Ok();  // tenants came with the state
  Result<std::vector<core::TenantConfig>> tenants = st.ListTenants();
  if (!tenants.ok()) return StoreError(tenants.status());
  for (const core::TenantConfig& t : tenants.value()) {
    if (t.name != "default" || common::TenantConfigToJson(t) !=
                                   common::TenantConfigToJson(*driver.core()->tenant("default"))) {
      driver.Step(core::TenantConfigured{t}, actor);
    }
  }
  return Status::Ok();
}

int64_t Service::Compact(TimeMs now) {
  ServiceState& s = *s_;
  s.driver.Advance(now);
  Result<int64_t> n = s.driver.CompactOnce(s.config.event_retention_days * 24 * 3600 * 1000,
                                           s.config.compaction_batch_events);
  if (!n.ok()) {
    log::Warn("compaction: " + n.message());
    return 0;
  }
  if (n.value() > 0) log::Debug("compacted " + std::to_string(n.value()) + " events");
  return n.value();
}

int Service::CompactionBatch() const { return s_->config.compaction_batch_events; }

void Service::Tick(TimeMs now) {
  ServiceState& s = *s_;
  if (s.driver.core() == nullptr) return;
  s.driver.Advance(now);
  if (s.driver.core()->NextWakeup() <= s.driver.now()) s.driver.Step(core::Tick{}, "scheduler");
}

TimeMs Service::NextWakeup() const {
  return s_->driver.core() == nullptr ? core::kNever : s_->driver.core()->NextWakeup();
}

void Service::SampleUtilization(TimeMs now) { s_->driver.SampleUtilization(now); }

// ---------------------------------------------------------------- agents

Result<std::string> Service::AgentRegister(const std::string& cert_node, const std::string& message,
                                           TimeMs now) {
  s_->driver.Advance(now);
  return s_->agents->Register(cert_node, message, s_->driver.now());
}

std::optional<std::string> Service::AgentMessage(const std::string& node,
                                                 const std::string& message, TimeMs now) {
  s_->driver.Advance(now);
  return s_->agents->Message(node, message, s_->driver.now());
}

void Service::AgentDisconnected(const std::string& node, TimeMs now) {
  s_->driver.Advance(now);
  s_->agents->Disconnected(node, s_->driver.now());
}

void Service::CheckLiveness(TimeMs now) {
  s_->driver.Advance(now);
  s_->agents->CheckLiveness(s_->driver.now());
}

std::vector<std::pair<std::string, std::string>> Service::TakeAgentMessages() {
  return s_->agents->TakeMessages();
}

std::vector<std::pair<int64_t, HttpResponse>> Service::TakeDeferredAnswers() {
  std::vector<std::pair<int64_t, HttpResponse>> out;
  for (AgentAnswer& a : s_->agents->TakeDeferredAnswers()) {
    HttpResponse r = a.error.ok() ? JsonAnswer(200, a.data).value() : StatusResponse(a.error);
    r.route = "/v1/jobs/{id}/logs";
    out.emplace_back(a.id, std::move(r));
  }
  return out;
}

void Service::ForgetDeferred(int64_t id) { s_->agents->ForgetDeferred(id); }

}  // namespace topo::daemon
