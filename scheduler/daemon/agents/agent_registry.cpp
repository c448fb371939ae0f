// AgentRegistry (agent_registry.hpp): registration, liveness, node-scoped
// authority over what agents report, and commands turned into messages.

#include "daemon/agents/agent_registry.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

#include "daemon/log.hpp"
#include "topo/common/base64.hpp"

namespace topo::daemon {

using core::JobId;
using core::NodeId;
using core::Result;
using core::Status;
using core::TimeMs;
using Json = nlohmann::json;

namespace {

// Refusals logged per connection before the log only counts them.
constexpr int64_t kLoggedRefusals = 5;

bool Holds(core::JobState s) {
  return s == core::JobState::kRunning || s == core::JobState::kPreempting;
}

}  // namespace

AgentRegistry::AgentRegistry(AgentHost& host, AgentSettings settings)
    : host_(host), settings_(settings) {}

AgentRegistry::Agent& AgentRegistry::AgentOf(const std::string& node) {
  auto [it, fresh] = agents_.try_emplace(node);
  if (fresh) {
    it->second.slot = static_cast<int>(slot_names_.size());
    slot_names_.push_back(node);
  }
  return it->second;
}

void AgentRegistry::SetDeadline(Agent& a, TimeMs deadline) {
  liveness_.Watch(a.slot, {core::kNever, deadline});
}

void AgentRegistry::ExpectAgent(const std::string& node) {
  Agent& a = AgentOf(node);
  if (liveness_.deadlines(a.slot).down_at != core::kNever) return;
  // Without an agent the reason counts from now: the node waits since. A
  // connected agent (one that was silent) keeps its last message.
  if (!a.connected) liveness_.Heard(a.slot, now_);
  SetDeadline(a, now_ + settings_.heartbeat_interval_ms * settings_.missed_heartbeats_down);
}

Result<std::string> AgentRegistry::Register(const std::string& cert_node, std::string_view text,
                                            TimeMs now) {
  now_ = std::max(now_, now);
  std::string field;
  Result<proto::AgentMessage> parsed = proto::ParseAgentMessage(text, &field);
  if (!parsed.ok()) return Status::Error("register refused: " + parsed.message());
  const auto* m = std::get_if<proto::Register>(&parsed.value());
  if (m == nullptr) {
    return Status::Error("the first message must be \"register\", not \"" +
                         std::string(proto::TypeOf(parsed.value())) + "\"");
  }
  if (m->protocol != proto::kProtocolVersion) {
    return Status::Error("the agent speaks protocol " + std::to_string(m->protocol) +
                         " and this scheduler " + std::to_string(proto::kProtocolVersion) +
                         ": install the same toposched version on both");
  }
  if (m->node != cert_node) {
    return Status::Error("the certificate is node " + cert_node + "'s, not " + m->node + "'s");
  }
  const core::SchedulerCore* core = host_.core();
  if (core == nullptr) return Status::Error("the scheduler has no topology yet");
  const core::Topology& topo = *host_.topology();
  const NodeId n = topo.FindNode(m->node);
  if (n < 0) return Status::Error("node " + m->node + " is not in the topology");
  Agent& a = AgentOf(m->node);
  a.connected = true;
  a.leaving = false;
  a.silenced = false;
  a.disconnected_at = -1;
  a.addr = m->addr;
  liveness_.Heard(a.slot, now_);
  SetDeadline(a, now_ + settings_.heartbeat_interval_ms * settings_.missed_heartbeats_down);
  // The ranks it still runs acknowledge its part of their runs (a daemon
  // restart left those runs expecting one).
  for (const proto::RunningRank& r : m->ranks) {
    if (const core::JobRecord* job = core->job(r.job)) Acknowledge(r.job, job->restarts, m->node);
  }
  const std::string actor = "agent:" + m->node;
  const core::NodeState state = core->cluster().node_state(n);
  if (state == core::NodeState::kDown || state == core::NodeState::kSuspect) {
    // As a resumed heartbeat: back up, or back to drained when an admin
    // drained it or a GPU failed.
    host_.StepCore(core::Heartbeat{n}, actor);
  }
  const int have = static_cast<int>(m->gpus.size());
  const int want = topo.node(n).gpus;
  const core::NodeState now_state = core->cluster().node_state(n);
  if (have != want && now_state != core::NodeState::kDrained &&
      now_state != core::NodeState::kDraining) {
    const std::string why = "agent reports " + std::to_string(have) + " GPUs; the topology has " +
                            std::to_string(want) +
                            ": fix the node or import a topology that matches, then resume";
    log::Warn("node " + m->node + ": " + why, {{"node", m->node}, {"gpus", have}});
    host_.StepCore(core::NodeStateRequested{n, core::NodeState::kDrained, why}, actor);
  }
  log::Info("agent " + m->node + " registered from " + m->addr + " (" +
                std::to_string(m->gpus.size()) + " GPUs, " + std::to_string(m->ranks.size()) +
                " ranks running, " + m->agent + ")",
            {{"node", m->node}, {"addr", m->addr}, {"gpus", m->gpus.size()}});
  proto::Registered reply{m->node, static_cast<int>(settings_.heartbeat_interval_ms), {}, {}};
  if (settings_.term > 0) reply.term = settings_.term;
  for (const auto& [id, job] : core->jobs()) {
    if (!Holds(job.state)) continue;
    for (const core::GpuSlot& slot : job.ranks) {
      if (slot.node == n) {
        reply.keep.push_back(id);
        break;
      }
    }
  }
  return proto::WriteSchedulerMessage(reply);
}

std::optional<std::string> AgentRegistry::Refuse(Agent& a, const std::string& node,
                                                 std::string_view type, const std::string& field,
                                                 const std::string& message, bool authority) {
  ++a.refused;
  ++refused_total_;
  if (a.refused <= kLoggedRefusals || a.refused % 100 == 0) {
    log::Warn("agent " + node + ": refused " +
                  (type.empty() ? std::string("a message") : std::string(type)) + " (" +
                  std::to_string(a.refused) + " so far): " + message.substr(0, 300),
              {{"node", node}, {"type", type}, {"field", field}, {"refusals", a.refused}});
  }
  if (authority) {
    // One audit row a minute per node and kind, with the refusals since
    // the last row: a flood cannot turn into a flood of writes.
    AuditMark& mark = audited_[{node, std::string(type)}];
    ++mark.refusals;
    const int64_t minute = now_ / core::kMinute;
    if (mark.minute != minute) {
      host_.Audit("agent:" + node, "agent.refused",
                  Json{{"node", node},
                       {"type", type},
                       {"field", field},
                       {"message", message.substr(0, 500)},
                       {"refusals", mark.refusals}});
      mark.minute = minute;
      mark.refusals = 0;
    }
  }
  return proto::WriteSchedulerMessage(proto::Error{message.substr(0, proto::kMaxReasonBytes),
                                                   field.substr(0, proto::kMaxNameBytes),
                                                   std::string(type.substr(0, 64))});
}

bool AgentRegistry::JobOnNode(const core::JobRecord& job, NodeId node) const {
  for (const core::GpuSlot& slot : job.ranks) {
    if (slot.node == node) return true;
  }
  if (std::find(job.spares.begin(), job.spares.end(), node) != job.spares.end()) return true;
  // Reports of the run before a restart moved it.
  auto run = runs_.find(job.id);
  if (run == runs_.end()) return false;
  const std::string& name = host_.topology()->node(node).name;
  return std::find(run->second.nodes.begin(), run->second.nodes.end(), name) !=
         run->second.nodes.end();
}

std::optional<std::string> AgentRegistry::Message(const std::string& node, std::string_view text,
                                                  TimeMs now) {
  now_ = std::max(now_, now);
  Agent& a = AgentOf(node);
  liveness_.Heard(a.slot, now_);
  if (a.connected) {
    SetDeadline(a, now_ + settings_.heartbeat_interval_ms * settings_.missed_heartbeats_down);
  }
  std::string field;
  Result<proto::AgentMessage> parsed = proto::ParseAgentMessage(text, &field);
  if (!parsed.ok()) {
    // The type, when it has a readable one, for the log and the reply.
    std::string type;
    const Json whole = Json::parse(text, nullptr, false);
    const size_t at = text.find("\"type\":\"");
    if (whole.is_object() && whole.contains("type") && whole["type"].is_string()) {
      if (whole["type"].get_ref<const std::string&>().size() <= 40) type = whole["type"];
    } else if (at != std::string_view::npos) {
      const size_t end = text.find('"', at + 8);
      if (end != std::string_view::npos && end - at - 8 <= 40)
        type = text.substr(at + 8, end - at - 8);
    }
    if (!proto::ValidEnvName(type)) type.clear();
    if (type == proto::LogsReply::kType) AnswerRefusedLogs(node, text, parsed.message());
    return Refuse(a, node, type, field, parsed.message(), false);
  }
  const core::SchedulerCore* core = host_.core();
  if (core == nullptr) return std::nullopt;
  const core::Topology& topo = *host_.topology();
  const NodeId n = topo.FindNode(node);
  if (n < 0)
    return Refuse(a, node, proto::TypeOf(parsed.value()), "", "node " + node + " left the topology",
                  true);
  if (a.silenced && a.connected) {
    // Its node went down (or suspect) for silence while this connection
    // stayed open (a paused agent, a network that came back): a message on
    // it is the heartbeat that brings the node back, as a `register` would
    // (drained stays drained).
    a.silenced = false;
    const core::NodeState state = core->cluster().node_state(n);
    if (state == core::NodeState::kDown || state == core::NodeState::kSuspect) {
      log::Info("agent " + node + " is heard from again on the same connection", {{"node", node}});
      host_.StepCore(core::Heartbeat{n}, "agent:" + node);
    }
  }
  return std::visit(
      [&](auto& m) -> std::optional<std::string> {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::Heartbeat>) {
          a.leaving = false;  // it stayed after all: a later close is a loss again
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, proto::Register>) {
          return Refuse(a, node, T::kType, "type", "already registered on this connection", false);
        } else if constexpr (std::is_same_v<T, proto::GpuEventReport>) {
          if (m.gpu >= topo.node(n).gpus) {
            return Refuse(a, node, T::kType, "gpu_event.gpu",
                          "gpu_event.gpu: node " + node + " has GPUs 0.." +
                              std::to_string(topo.node(n).gpus - 1) + ", not " +
                              std::to_string(m.gpu),
                          true);
          }
          host_.StepCore(core::GpuEvent{n, m.gpu, m.kind, static_cast<int>(m.code)},
                         "agent:" + node);
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, proto::RankExited>) {
          return OnRankExited(a, node, n, m);
        } else if constexpr (std::is_same_v<T, proto::CheckpointReport>) {
          return OnCheckpoint(a, node, n, m);
        } else if constexpr (std::is_same_v<T, proto::LaunchFailed>) {
          return OnLaunchFailed(a, node, n, m);
        } else if constexpr (std::is_same_v<T, proto::LogsReply>) {
          return OnLogs(a, node, std::move(m));
        } else if constexpr (std::is_same_v<T, proto::Started>) {
          return OnStarted(a, node, n, m);
        } else if constexpr (std::is_same_v<T, proto::StartWaiting>) {
          return OnStartWaiting(a, node, n, m);
        } else if constexpr (std::is_same_v<T, proto::Leaving>) {
          if (!a.leaving) {
            log::Info("agent " + node + " is leaving; its ranks keep running for the next agent",
                      {{"node", node}});
          }
          a.leaving = true;
          return std::nullopt;
        } else {
          static_assert(std::is_same_v<T, proto::Drained>);
          OnDrained(node, n);
          return std::nullopt;
        }
      },
      parsed.value());
}

std::optional<std::string> AgentRegistry::OnRankExited(Agent& a, const std::string& node, NodeId n,
                                                       const proto::RankExited& m) {
  const core::JobRecord* job = host_.core()->job(m.job);
  const std::string id = std::to_string(m.job);
  if (job == nullptr) {
    if (host_.JobEnded(m.job)) return std::nullopt;  // late news of an ended job
    return Refuse(a, node, m.kType, "rank_exited.job", "rank_exited.job: job " + id + " is unknown",
                  true);
  }
  if (!JobOnNode(*job, n)) {
    return Refuse(a, node, m.kType, "rank_exited.job",
                  "rank_exited.job: job " + id + " has no ranks on node " + node, true);
  }
  if (m.restart_count != job->restarts || !Holds(job->state))
    return std::nullopt;  // an earlier run
  if (m.rank >= static_cast<int>(job->ranks.size()) || job->ranks[m.rank].node != n) {
    return Refuse(a, node, m.kType, "rank_exited.rank",
                  "rank_exited.rank: rank " + std::to_string(m.rank) + " of job " + id +
                      " does not run on node " + node,
                  true);
  }
  const std::string actor = "agent:" + node;
  if (m.exit_code == 0 && m.signal == 0 && m.status_known) {
    Run& run = runs_[m.job];
    if (run.restart_count != m.restart_count || run.exited_ok.size() != job->ranks.size()) {
      run.restart_count = m.restart_count;
      run.exited_ok.assign(job->ranks.size(), false);
      run.ok_count = 0;
    }
    if (!run.exited_ok[m.rank]) {
      run.exited_ok[m.rank] = true;
      if (++run.ok_count == static_cast<int>(job->ranks.size())) {
        host_.StepCore(core::JobFinished{m.job, 0}, actor);
      }
    }
  } else if (job->state == core::JobState::kRunning) {
    host_.StepCore(core::RankExited{m.job, m.rank, m.exit_code != 0 ? m.exit_code : 128 + m.signal},
                   actor);
  }
  return std::nullopt;
}

std::optional<std::string> AgentRegistry::OnLaunchFailed(Agent& a, const std::string& node,
                                                         NodeId n, const proto::LaunchFailed& m) {
  const core::JobRecord* job = host_.core()->job(m.job);
  const std::string id = std::to_string(m.job);
  if (job == nullptr) {
    if (host_.JobEnded(m.job)) return std::nullopt;
    return Refuse(a, node, m.kType, "launch_failed.job",
                  "launch_failed.job: job " + id + " is unknown", true);
  }
  if (!JobOnNode(*job, n)) {
    return Refuse(a, node, m.kType, "launch_failed.job",
                  "launch_failed.job: job " + id + " has no ranks on node " + node, true);
  }
  if (m.restart_count != job->restarts || job->state != core::JobState::kRunning) {
    return std::nullopt;
  }
  host_.StepCore(core::JobLaunchFailed{m.job, n, m.reason, m.permanent}, "agent:" + node);
  return std::nullopt;
}

std::optional<std::string> AgentRegistry::OnCheckpoint(Agent& a, const std::string& node, NodeId n,
                                                       const proto::CheckpointReport& m) {
  const core::JobRecord* job = host_.core()->job(m.job);
  const std::string id = std::to_string(m.job);
  if (job == nullptr) {
    if (host_.JobEnded(m.job)) return std::nullopt;
    return Refuse(a, node, m.kType, "checkpoint.job", "checkpoint.job: job " + id + " is unknown",
                  true);
  }
  if (!JobOnNode(*job, n)) {
    return Refuse(a, node, m.kType, "checkpoint.job",
                  "checkpoint.job: job " + id + " has no ranks on node " + node, true);
  }
  if (m.tier == proto::CheckpointTier::kPersistent) {
    host_.StepCore(core::CheckpointCompleted{m.job, m.step}, "agent:" + node);
  }
  return std::nullopt;
}

std::optional<std::string> AgentRegistry::OnLogs(Agent& a, const std::string& node,
                                                 proto::LogsReply m) {
  auto it = logs_asks_.find(m.req);
  if (it == logs_asks_.end()) {
    // Answered after the server gave up waiting: not an error.
    if (m.req < next_ask_) return std::nullopt;
    return Refuse(a, node, m.kType, "logs.req",
                  "logs.req: no request " + std::to_string(m.req) + " was made", true);
  }
  if (it->second.node != node) {
    return Refuse(a, node, m.kType, "logs.req",
                  "logs.req: request " + std::to_string(m.req) + " went to another node", true);
  }
  const LogsAsk ask = it->second;
  logs_asks_.erase(it);
  if (m.error) {
    answers_.push_back(
        {m.req,
         Status::Error("rank " + std::to_string(ask.rank) + " of job " + std::to_string(ask.job) +
                           " on node " + node + ": " + *m.error,
                       core::ErrorCode::kNotFound),
         nullptr});
  } else {
    answers_.push_back({m.req, Status::Ok(),
                        Json{{"job", ask.job},
                             {"rank", ask.rank},
                             {"node", node},
                             {"offset", *m.offset},
                             {"next_offset", *m.next_offset},
                             {"size", *m.size},
                             // The bytes exactly, and as text for reading
                             // (invalid UTF-8 shown as U+FFFD).
                             {"data_base64", common::Base64Encode(*m.data)},
                             {"data", std::move(*m.data)}}});
  }
  return std::nullopt;
}

const core::JobRecord* AgentRegistry::ReportedRun(Agent& a, const std::string& node, NodeId n,
                                                  std::string_view type, JobId id,
                                                  int restart_count,
                                                  std::optional<std::string>* refusal) {
  const core::JobRecord* job = host_.core()->job(id);
  const std::string field = std::string(type) + ".job";
  if (job == nullptr) {
    // Late news of an ended job is not a refusal.
    if (!host_.JobEnded(id)) {
      *refusal =
          Refuse(a, node, type, field, field + ": job " + std::to_string(id) + " is unknown", true);
    }
    return nullptr;
  }
  // An earlier run's start reported late (the run was requeued or restarted
  // meanwhile): not news, and not a refusal.
  if (restart_count != job->restarts || !Holds(job->state)) return nullptr;
  if (!JobOnNode(*job, n)) {
    *refusal =
        Refuse(a, node, type, field,
               field + ": job " + std::to_string(id) + " has no ranks on node " + node, true);
    return nullptr;
  }
  return job;
}

std::optional<std::string> AgentRegistry::OnStarted(Agent& a, const std::string& node, NodeId n,
                                                    const proto::Started& m) {
  std::optional<std::string> refusal;
  if (ReportedRun(a, node, n, m.kType, m.job, m.restart_count, &refusal) != nullptr) {
    Acknowledge(m.job, m.restart_count, node);
  }
  return refusal;
}

std::optional<std::string> AgentRegistry::OnStartWaiting(Agent& a, const std::string& node,
                                                         NodeId n, const proto::StartWaiting& m) {
  std::optional<std::string> refusal;
  if (ReportedRun(a, node, n, m.kType, m.job, m.restart_count, &refusal) == nullptr) {
    return refusal;
  }
  auto it = pending_starts_.find(m.job);
  if (it == pending_starts_.end() || it->second.restart_count != m.restart_count ||
      std::find(it->second.nodes.begin(), it->second.nodes.end(), node) == it->second.nodes.end()) {
    return std::nullopt;  // already acknowledged
  }
  // The agent bounds its own wait (it fails the launch when that runs out);
  // the scheduler's timeout then covers an agent that went quiet after it.
  const TimeMs deadline = now_ + m.wait_ms + settings_.start_ack_timeout_ms;
  if (deadline > it->second.deadline) {
    start_deadlines_.erase({it->second.deadline, m.job});
    it->second.deadline = deadline;
    start_deadlines_.insert({deadline, m.job});
  }
  log::Info("job " + std::to_string(m.job) + ": the start waits on " + node + " (" + m.reason +
                ", up to " + std::to_string(m.wait_ms / 1000) + " s)",
            {{"job", m.job}, {"node", node}, {"wait_ms", m.wait_ms}});
  return std::nullopt;
}

void AgentRegistry::ExpectAcks(JobId job, int restart_count, std::vector<std::string> nodes,
                               TimeMs deadline) {
  ForgetAcks(job);
  if (nodes.empty()) return;
  PendingStart& p = pending_starts_[job];
  p = PendingStart{restart_count, std::move(nodes), now_, deadline};
  start_deadlines_.insert({deadline, job});
}

void AgentRegistry::ForgetAcks(JobId job) {
  auto it = pending_starts_.find(job);
  if (it == pending_starts_.end()) return;
  start_deadlines_.erase({it->second.deadline, job});
  pending_starts_.erase(it);
}

void AgentRegistry::Acknowledge(JobId job, int restart_count, const std::string& node) {
  auto it = pending_starts_.find(job);
  if (it == pending_starts_.end() || it->second.restart_count != restart_count) return;
  std::erase(it->second.nodes, node);
  if (it->second.nodes.empty()) ForgetAcks(job);
}

void AgentRegistry::CheckStarts() {
  const core::SchedulerCore* core = host_.core();
  while (!start_deadlines_.empty() && start_deadlines_.begin()->first <= now_) {
    const JobId id = start_deadlines_.begin()->second;
    const PendingStart p = pending_starts_.at(id);
    ForgetAcks(id);
    const core::JobRecord* job = core->job(id);
    // A run that ended, moved or was requeued meanwhile is not this one.
    if (job == nullptr || job->state != core::JobState::kRunning ||
        job->restarts != p.restart_count) {
      continue;
    }
    core::StartUnacknowledged e{id, {}, p.deadline - p.sent};
    std::string names;
    core::NodeStatesRequested down;  // the nodes that have no agent at all
    for (const std::string& node : p.nodes) {
      const NodeId n = host_.topology()->FindNode(node);
      if (n < 0) continue;
      e.nodes.push_back(n);
      names += (names.empty() ? "" : ", ") + node;
      if (!Connected(node) && core->cluster().node_state(n) != core::NodeState::kDown) {
        down.requests.push_back(core::NodeStateRequested{
            n, core::NodeState::kDown,
            "no agent acknowledged the start of job " + std::to_string(id) + " within " +
                std::to_string(e.waited) + " ms (none is connected)"});
      }
    }
    log::Warn("job " + std::to_string(id) + ": no `started` from " + names + " within " +
                  std::to_string(e.waited) + " ms",
              {{"job", id}, {"nodes", names}, {"restart_count", p.restart_count}});
    // A node with no agent connected proved nothing: it goes down, which
    // recovers the job as a lost node does. Nodes whose agent is connected
    // but silent about the start: the core requeues the run.
    if (down.requests.size() == 1) {
      host_.StepCore(down.requests[0], "scheduler");
    } else if (!down.requests.empty()) {
      host_.StepCore(down, "scheduler");
    }
    job = core->job(id);
    if (job != nullptr && job->state == core::JobState::kRunning &&
        job->restarts == p.restart_count) {
      host_.StepCore(e, "scheduler");
    }
  }
}

void AgentRegistry::AnswerRefusedLogs(const std::string& node, std::string_view text,
                                      const std::string& why) {
  // The request it answers: its "req", read leniently (the message as a
  // whole did not parse).
  int64_t req = -1;
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("req") && j["req"].is_number_integer()) {
    req = j["req"].get<int64_t>();
  } else if (const size_t at = text.find("\"req\":"); at != std::string_view::npos) {
    std::string_view digits = text.substr(at + 6);
    while (!digits.empty() && digits.front() == ' ') digits.remove_prefix(1);
    std::from_chars(digits.data(), digits.data() + digits.size(), req);
  }
  auto it = logs_asks_.find(req);
  if (it == logs_asks_.end() || it->second.node != node) return;
  answers_.push_back(
      {it->first,
       Status::Error("node " + node + "'s agent answered with a logs message " +
                         "the scheduler refused (" + why.substr(0, 300) + "): the log of rank " +
                         std::to_string(it->second.rank) + " cannot be shown; the agent's log on " +
                         node + " says more",
                     core::ErrorCode::kUnavailable),
       nullptr});
  logs_asks_.erase(it);
}

void AgentRegistry::OnDrained(const std::string& node, NodeId n) {
  // The agent stopped every rank here (after a checkpoint, when graceful):
  // the core restarts the node's jobs elsewhere.
  for (const auto& [id, job] : host_.core()->jobs()) {
    if (job.state != core::JobState::kRunning) continue;
    for (const core::GpuSlot& slot : job.ranks) {
      if (slot.node == n) {
        host_.StepCore(core::NodeEvacuated{n, "agent stopped its ranks"}, "agent:" + node);
        return;
      }
    }
  }
}

void AgentRegistry::Disconnected(const std::string& node, TimeMs now) {
  now_ = std::max(now_, now);
  auto it = agents_.find(node);
  if (it == agents_.end()) return;
  Agent& a = it->second;
  a.connected = false;
  a.disconnected_at = now_;
  a.refused = 0;
  // A closed connection is a known moment of loss (a killed agent, a
  // crashed node): one interval less of grace. An agent that said it was
  // leaving (a restart, an upgrade: its ranks run on) gets the restart
  // grace to come back, NVML's start and its certificate included. A cut
  // network closes nothing: the heartbeats tell.
  const TimeMs interval = settings_.heartbeat_interval_ms;
  TimeMs closed_limit = std::max(interval, interval * settings_.missed_heartbeats_down - interval);
  if (a.leaving) closed_limit = std::max(closed_limit, settings_.restart_grace_ms);
  log::Info(
      "agent " + node + " disconnected" +
          (a.leaving ? " (leaving): down unless back within " + std::to_string(closed_limit) + " ms"
                     : std::string()),
      {{"node", node}, {"leaving", a.leaving}});
  SetDeadline(a, now_ + closed_limit);
  for (auto r = logs_asks_.begin(); r != logs_asks_.end();) {
    if (r->second.node != node) {
      ++r;
      continue;
    }
    answers_.push_back({r->first,
                        Status::Error("node " + node +
                                          "'s agent disconnected before it answered; retry when "
                                          "it is back",
                                      core::ErrorCode::kUnavailable),
                        nullptr});
    r = logs_asks_.erase(r);
  }
  const core::SchedulerCore* core = host_.core();
  if (core == nullptr) return;
  const NodeId n = host_.topology()->FindNode(node);
  if (n >= 0 && core->cluster().node_state(n) == core::NodeState::kUp) {
    // Not a target for new work or restarts while it may come back.
    host_.StepCore(core::NodeStateRequested{n, core::NodeState::kSuspect, "agent disconnected"},
                   "scheduler");
  }
}

void AgentRegistry::CheckLiveness(TimeMs now) {
  now_ = std::max(now_, now);
  const core::SchedulerCore* core = host_.core();
  if (core == nullptr) return;
  // Every node expired by now goes down in one event: the core applies them
  // all before it restarts any job, so no restart lands on a node that this
  // same check takes down a moment later.
  core::NodeStatesRequested down;
  for (const core::LivenessTracker::Expiry& x : liveness_.Expire(now_)) {
    const std::string& node = slot_names_[static_cast<size_t>(x.node)];
    Agent& a = agents_.at(node);
    const NodeId n = host_.topology()->FindNode(node);
    if (n < 0 || core->cluster().node_state(n) == core::NodeState::kDown) continue;
    const TimeMs silent = now_ - x.last_heard;
    std::string why;
    if (a.connected) {
      why = "agent silent for " + std::to_string(silent) + " ms (connected)";
      a.silenced = true;  // its next message on this connection brings the node back
    } else if (a.disconnected_at >= 0) {
      why = "agent disconnected for " + std::to_string(now_ - a.disconnected_at) + " ms" +
            (a.leaving ? " after it said it was leaving" : "");
    } else {
      // Not connected since this daemon started, or resumed without one.
      why = "no agent registered for " + std::to_string(silent) + " ms";
    }
    down.requests.push_back(core::NodeStateRequested{n, core::NodeState::kDown, why});
  }
  if (down.requests.size() == 1) {
    host_.StepCore(down.requests[0], "scheduler");
  } else if (!down.requests.empty()) {
    host_.StepCore(down, "scheduler");
  }
  if (settings_.send_jobs) CheckStarts();
}

void AgentRegistry::Restore(const std::vector<std::string>& nodes, TimeMs grace_ms, TimeMs now) {
  now_ = std::max(now_, now);
  const TimeMs limit = settings_.heartbeat_interval_ms * settings_.missed_heartbeats_down;
  for (const std::string& name : nodes) {
    Agent& a = AgentOf(name);
    a.connected = false;
    liveness_.Heard(a.slot, now_);
    SetDeadline(a, now_ + std::max(grace_ms, limit));
  }
  const core::SchedulerCore* core = host_.core();
  if (core == nullptr) return;
  // Where each running job's ranks are, for the stop messages of a later
  // cancel, preemption or restart (the agents re-report their ranks), and
  // the acknowledgements its run owes: a start sent just before the restart
  // may have reached no agent.
  for (const auto& [id, job] : core->jobs()) {
    if (!Holds(job.state)) continue;
    Run& run = runs_[id];
    run.restart_count = job.restarts;
    run.exited_ok.assign(job.ranks.size(), false);
    run.nodes.clear();
    for (const core::NodeLaunch& nl : core::GroupByNode(job.ranks)) {
      run.nodes.push_back(host_.topology()->node(nl.node).name);
    }
    if (settings_.send_jobs && job.state == core::JobState::kRunning) {
      ExpectAcks(id, job.restarts, run.nodes,
                 now_ + std::max(grace_ms, limit) + settings_.start_ack_timeout_ms);
    }
  }
}

void AgentRegistry::Send(const std::string& node, const proto::SchedulerMessage& m) {
  outbox_.emplace_back(node, proto::WriteSchedulerMessage(m));
}

void AgentRegistry::SendStart(JobId id, const std::vector<core::GpuSlot>& ranks,
                              const core::Launch& launch) {
  const core::Topology& topo = *host_.topology();
  if (ranks.empty() || launch.nodes.empty()) return;
  std::string unix_user = launch.unix_user;
  if (unix_user.empty()) {
    // A job submitted before requests carried the account.
    if (const core::JobRecord* job = host_.core()->job(id)) {
      unix_user = host_.UnixUserOf(job->request.user);
    }
  }
  const std::string& master = topo.node(launch.master_node).name;
  auto agent = agents_.find(master);
  proto::Start start;
  start.job = id;
  start.restart_count = launch.restart_count;
  start.checkpoint_step = launch.checkpoint_step;
  start.world_size = launch.world_size;
  start.master_addr =
      agent != agents_.end() && !agent->second.addr.empty() ? agent->second.addr : master;
  start.master_port = launch.master_port;
  start.group_world_size = static_cast<int>(launch.nodes.size());
  start.layout = proto::FromParallelism(launch.parallelism);
  start.command = launch.command;
  start.launch = launch.process.launch;
  start.env = launch.process.env;
  start.working_dir = launch.process.working_dir;
  start.output = launch.process.output;
  start.error = launch.process.error;
  start.unix_user = unix_user;
  start.memory_mb = launch.memory_mb;
  start.cpu_millis = launch.cpu_millis;
  if (launch.pids_max > 0) start.pids_max = launch.pids_max;
  if (launch.array_job != 0) {
    start.array_job = launch.array_job;
    start.array_task = launch.array_task;
  }
  std::vector<std::string> nodes;
  for (const core::NodeLaunch& nl : launch.nodes) {
    start.group_rank = nl.group_rank;
    start.ranks.clear();
    for (size_t i = 0; i < nl.ranks.size(); ++i) {
      start.ranks.push_back(proto::StartRank{nl.ranks[i], static_cast<int>(i), nl.gpus[i]});
    }
    nodes.push_back(topo.node(nl.node).name);
    Send(nodes.back(), start);
  }
  ExpectAcks(id, launch.restart_count, nodes, now_ + settings_.start_ack_timeout_ms);
  Run& run = runs_[id];
  for (const std::string& old : run.nodes) {
    if (std::find(nodes.begin(), nodes.end(), old) == nodes.end()) {
      Send(old, proto::Stop{id, "moved"});
    }
  }
  run = Run{launch.restart_count, std::vector<bool>(ranks.size(), false), 0, std::move(nodes)};
}

void AgentRegistry::Dispatch(const std::vector<core::Command>& commands, TimeMs now) {
  now_ = std::max(now_, now);
  if (!settings_.send_jobs) {
    drain_modes_.clear();
    return;
  }
  const core::Topology& topo = *host_.topology();
  auto nodes_of = [&](const std::vector<core::GpuSlot>& ranks) {
    std::vector<std::string> out;
    for (const core::NodeLaunch& nl : core::GroupByNode(ranks)) {
      out.push_back(topo.node(nl.node).name);
    }
    return out;
  };
  for (const core::Command& c : commands) {
    if (const auto* x = std::get_if<core::StartJob>(&c)) {
      SendStart(x->id, x->ranks, x->launch);
    } else if (const auto* x = std::get_if<core::RestartJob>(&c)) {
      SendStart(x->id, x->ranks, x->launch);
    } else if (const auto* x = std::get_if<core::StopJob>(&c)) {
      ForgetAcks(x->id);
      std::vector<std::string> nodes;
      if (auto it = runs_.find(x->id); it != runs_.end()) {
        nodes = std::move(it->second.nodes);
        runs_.erase(it);
      } else if (const core::JobRecord* job = host_.core()->job(x->id)) {
        nodes = nodes_of(job->ranks);
      }
      for (const std::string& n : nodes) Send(n, proto::Stop{x->id, x->reason});
    } else if (const auto* x = std::get_if<core::RequestCheckpoint>(&c)) {
      if (const core::JobRecord* job = host_.core()->job(x->id)) {
        for (const std::string& n : nodes_of(job->ranks)) {
          Send(n, proto::CheckpointRequest{x->id, x->reason});
        }
      }
    } else if (const auto* x = std::get_if<core::NodeStateChanged>(&c)) {
      // A node out of down (an admin's resume) whose agent this daemon knew
      // must see it again. (A node no agent ever registered for proves
      // itself when a job starts there: its start must be acknowledged.)
      const std::string& name = topo.node(x->node).name;
      if (x->state != core::NodeState::kDown && agents_.count(name)) ExpectAgent(name);
    } else if (const auto* x = std::get_if<core::DrainNode>(&c)) {
      const std::string& name = topo.node(x->node).name;
      auto mode = drain_modes_.find(name);
      if (mode == drain_modes_.end()) continue;
      if (mode->second != "wait") {
        Send(name, proto::Drain{mode->second == "immediate" ? proto::DrainMode::kImmediate
                                                            : proto::DrainMode::kGraceful,
                                x->reason});
      }
      drain_modes_.erase(mode);
    }
  }
}

void AgentRegistry::SetDrainMode(const std::string& node, const std::string& mode) {
  if (mode.empty()) {
    drain_modes_.erase(node);
  } else {
    drain_modes_[node] = mode;
  }
}

Result<int64_t> AgentRegistry::AskLogs(const std::string& node, JobId job, int rank, int64_t offset,
                                       int64_t max) {
  if (!Connected(node)) {
    return Status::Error("rank " + std::to_string(rank) + "'s log is on node " + node +
                         ", whose agent is not connected; retry when it is back");
  }
  const int64_t req = next_ask_++;
  logs_asks_[req] = LogsAsk{node, job, rank};
  Send(node, proto::LogsRequest{req, job, rank, offset,
                                std::clamp<int64_t>(max, 1, proto::kMaxLogChunkBytes)});
  return req;
}

void AgentRegistry::AskCheckpoint(const std::vector<std::string>& nodes, JobId job,
                                  const std::string& reason) {
  for (const std::string& n : nodes) Send(n, proto::CheckpointRequest{job, reason});
}

bool AgentRegistry::Connected(const std::string& node) const {
  auto it = agents_.find(node);
  return it != agents_.end() && it->second.connected;
}

std::vector<std::pair<std::string, std::string>> AgentRegistry::TakeMessages() {
  return std::exchange(outbox_, {});
}

std::vector<AgentAnswer> AgentRegistry::TakeDeferredAnswers() {
  return std::exchange(answers_, {});
}

void AgentRegistry::ForgetDeferred(int64_t id) { logs_asks_.erase(id); }

}  // namespace topo::daemon
