// Node agents: registration, heartbeats and liveness, their reports turned
// into core events, and the core's commands turned into agent messages
// (docs/agent-protocol.md).

#include <set>

#include "daemon/service_internal.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"

namespace topo::daemon {

using core::JobId;
using core::NodeId;
using core::Result;
using core::Status;
using core::TimeMs;

namespace {

Result<Json> ParseMessage(const std::string& text) {
  if (text.size() > (1u << 20)) return Status::Error("message larger than 1 MiB");
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status::Error("a message is a JSON object with a string \"type\"");
  }
  return j;
}

Result<int64_t> IntOf(const Json& j, const char* key, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return Status::Error(std::string(key) + " must be a whole number");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return Status::Error(std::string(key) + " is out of range");
  return v;
}

}  // namespace

Result<std::string> Service::AgentRegister(const std::string& cert_node, const std::string& message,
                                           TimeMs now) {
  ServiceState& s = *s_;
  s.now = std::max(s.now, now);
  Result<Json> m = ParseMessage(message);
  if (!m.ok()) return m.status();
  const Json& j = m.value();
  if (j["type"] != "register") return Status::Error("the first message must be \"register\"");
  if (!j.contains("node") || !j["node"].is_string()) return Status::Error("register needs node");
  const std::string node = j["node"];
  if (node != cert_node) {
    return Status::Error("the certificate is node " + cert_node + "'s, not " + node + "'s");
  }
  if (s.core == nullptr) return Status::Error("the scheduler has no topology yet");
  const NodeId n = s.topology->FindNode(node);
  if (n < 0) return Status::Error("node " + node + " is not in the topology");
  ServiceState::Agent& a = s.agents[node];
  a.connected = true;
  a.last_seen = s.now;
  a.disconnected_at = -1;
  a.addr = j.contains("addr") && j["addr"].is_string() ? j["addr"].get<std::string>() : node;
  const core::NodeState state = s.core->cluster().node_state(n);
  if (state == core::NodeState::kDown || state == core::NodeState::kSuspect) {
    s.Step(core::NodeStateRequested{n, core::NodeState::kUp, "agent registered"}, "agent:" + node);
  }
  // The jobs this node should keep running; the agent stops the others.
  Json keep = Json::array();
  for (const auto& [id, job] : s.core->jobs()) {
    if (job.state != core::JobState::kRunning && job.state != core::JobState::kPreempting) continue;
    for (const core::GpuSlot& slot : job.ranks) {
      if (slot.node == n) {
        keep.push_back(id);
        break;
      }
    }
  }
  return Json{{"type", "registered"},
              {"node", node},
              {"heartbeat_interval_ms", s.config.heartbeat_interval_ms},
              {"keep", keep}}
      .dump();
}

Status Service::AgentMessage(const std::string& node, const std::string& message, TimeMs now) {
  ServiceState& s = *s_;
  s.now = std::max(s.now, now);
  Result<Json> m = ParseMessage(message);
  if (!m.ok()) return m.status();
  const Json& j = m.value();
  const std::string type = j["type"];
  ServiceState::Agent& a = s.agents[node];
  a.last_seen = s.now;
  if (s.core == nullptr) return Status::Ok();
  const NodeId n = s.topology->FindNode(node);
  if (n < 0) return Status::Error("node " + node + " left the topology");
  const std::string actor = "agent:" + node;
  if (type == "heartbeat") return Status::Ok();
  if (type == "gpu_event") {
    Result<int64_t> gpu = IntOf(j, "gpu", 0, s.topology->node(n).gpus - 1);
    if (!gpu.ok()) return gpu.status();
    Json event = {{"type", "gpu_event"},
                  {"node", node},
                  {"gpu", gpu.value()},
                  {"kind", j.value("kind", "")},
                  {"code", j.value("code", 0)}};
    Result<core::Event> e = common::EventFromJson(event, *s.topology);
    if (!e.ok()) return Status::Error("gpu_event: " + e.message());
    s.Step(e.value(), actor);
    return Status::Ok();
  }
  if (type == "rank_exited" || type == "checkpoint") {
    Result<int64_t> id = IntOf(j, "job", 1, INT64_MAX);
    if (!id.ok()) return id.status();
    const core::JobRecord* job = s.core->job(id.value());
    if (job == nullptr) {
      // A late report about a job that has ended is not an error.
      if (s.JobTenant(id.value())) return Status::Ok();
      return Status::Error("job " + std::to_string(id.value()) + " is unknown");
    }
    bool on_node = false;
    for (const core::GpuSlot& slot : job->ranks) on_node |= slot.node == n;
    if (type == "checkpoint") {
      Result<int64_t> step = IntOf(j, "step", 0, INT64_MAX);
      if (!step.ok()) return step.status();
      if (j.value("tier", "persistent") == "persistent") {
        s.Step(core::CheckpointCompleted{id.value(), step.value()}, actor);
      }
      return Status::Ok();
    }
    Result<int64_t> rank = IntOf(j, "rank", 0, job->request.spec.gpus - 1);
    if (!rank.ok()) return rank.status();
    const int restart = static_cast<int>(j.value("restart_count", 0));
    if (!on_node || restart != job->restarts) return Status::Ok();  // an earlier run's rank
    const int code = static_cast<int>(j.value("exit_code", 0));
    const int signal = static_cast<int>(j.value("signal", 0));
    if (code == 0 && signal == 0) {
      ServiceState::Run& run = s.runs[id.value()];
      if (run.restart_count != restart || run.exited_ok.size() != job->ranks.size()) {
        run = ServiceState::Run{restart, std::vector<bool>(job->ranks.size(), false), 0, {}};
      }
      if (!run.exited_ok[rank.value()]) {
        run.exited_ok[rank.value()] = true;
        if (++run.ok_count == static_cast<int>(job->ranks.size())) {
          s.Step(core::JobFinished{id.value(), 0}, actor);
        }
      }
    } else if (job->state == core::JobState::kRunning) {
      s.Step(core::RankExited{id.value(), static_cast<int>(rank.value()),
                              code != 0 ? code : 128 + signal},
             actor);
    }
    return Status::Ok();
  }
  if (type == "logs") {
    Result<int64_t> req = IntOf(j, "req", 1, INT64_MAX);
    if (!req.ok()) return req.status();
    auto it = s.agent_requests.find(req.value());
    if (it == s.agent_requests.end()) {
      // Answered late, after the server gave up waiting: not an error.
      if (req.value() < s.next_agent_request) return Status::Ok();
      return Status::Error("logs: no request " + std::to_string(req.value()) + " was made");
    }
    if (it->second.node != node) {
      return Status::Error("logs: request " + std::to_string(req.value()) +
                           " went to another node");
    }
    const ServiceState::AgentRequest ask = it->second;
    s.agent_requests.erase(it);
    HttpResponse answer;
    if (j.contains("error") && j["error"].is_string()) {
      answer =
          Error(404, "rank " + std::to_string(ask.rank) + " of job " + std::to_string(ask.job) +
                         " on node " + node + ": " + j["error"].get<std::string>().substr(0, 500));
    } else {
      Result<int64_t> offset = IntOf(j, "offset", 0, INT64_MAX);
      Result<int64_t> next = IntOf(j, "next_offset", 0, INT64_MAX);
      Result<int64_t> size = IntOf(j, "size", 0, INT64_MAX);
      if (!offset.ok() || !next.ok() || !size.ok() || !j.contains("data") ||
          !j["data"].is_string()) {
        return Status::Error("logs: needs offset, next_offset, size and data");
      }
      answer = JsonResponse(200, Json{{"job", ask.job},
                                      {"rank", ask.rank},
                                      {"node", node},
                                      {"offset", offset.value()},
                                      {"next_offset", next.value()},
                                      {"size", size.value()},
                                      {"data", j["data"]}});
    }
    answer.route = "/v1/jobs/{id}/logs";
    s.deferred_answers.emplace_back(req.value(), std::move(answer));
    return Status::Ok();
  }
  if (type == "drained") {
    // The agent stopped every rank here (after a checkpoint, when graceful):
    // the core restarts the node's jobs elsewhere.
    bool busy = false;
    for (const auto& [id, job] : s.core->jobs()) {
      if (job.state != core::JobState::kRunning) continue;
      for (const core::GpuSlot& slot : job.ranks) busy |= slot.node == n;
      if (busy) break;
    }
    if (busy) s.Step(core::NodeEvacuated{n, "agent stopped its ranks"}, actor);
    return Status::Ok();
  }
  return Status::Error("unknown message type \"" + type.substr(0, 40) + "\"");
}

void Service::AgentDisconnected(const std::string& node, TimeMs now) {
  ServiceState& s = *s_;
  s.now = std::max(s.now, now);
  auto it = s.agents.find(node);
  if (it != s.agents.end()) {
    it->second.connected = false;
    it->second.disconnected_at = s.now;
  }
  // Requests that waited on this agent get their answer now.
  for (auto r = s.agent_requests.begin(); r != s.agent_requests.end();) {
    if (r->second.node != node) {
      ++r;
      continue;
    }
    HttpResponse answer = Error(503, "node " + node +
                                         "'s agent disconnected before it answered; retry "
                                         "when it is back");
    answer.route = "/v1/jobs/{id}/logs";
    s.deferred_answers.emplace_back(r->first, std::move(answer));
    r = s.agent_requests.erase(r);
  }
}

void Service::CheckLiveness(TimeMs now) {
  ServiceState& s = *s_;
  if (s.core == nullptr) return;
  s.now = std::max(s.now, now);
  const TimeMs interval = s.config.heartbeat_interval_ms;
  const TimeMs limit = interval * s.config.missed_heartbeats_down;
  // A closed connection is a known moment of loss (a killed agent, a crashed
  // node): one interval less of grace, still time for an agent restarted on
  // purpose to come back. A cut network closes nothing: the heartbeats tell.
  const TimeMs closed_limit = std::max(interval, limit - interval);
  for (auto& [name, agent] : s.agents) {
    const bool closed = !agent.connected && agent.disconnected_at >= 0 &&
                        s.now - agent.disconnected_at >= closed_limit;
    if (s.now - agent.last_seen < limit && !closed) continue;
    const NodeId n = s.topology->FindNode(name);
    if (n < 0) continue;
    const core::NodeState state = s.core->cluster().node_state(n);
    if (state == core::NodeState::kDown) continue;
    const std::string why =
        closed ? "agent disconnected for " + std::to_string(s.now - agent.disconnected_at) + " ms"
               : "agent silent for " + std::to_string(s.now - agent.last_seen) + " ms (" +
                     (agent.connected ? "connected" : "disconnected") + ")";
    s.Step(core::NodeStateRequested{n, core::NodeState::kDown, why}, "scheduler");
  }
}

std::vector<std::pair<std::string, std::string>> Service::TakeAgentMessages() {
  return std::exchange(s_->outbox, {});
}

std::vector<std::pair<int64_t, HttpResponse>> Service::TakeDeferredAnswers() {
  return std::exchange(s_->deferred_answers, {});
}

void Service::ForgetDeferred(int64_t id) { s_->agent_requests.erase(id); }

void ServiceState::Dispatch(const std::vector<core::Command>& commands) {
  // In Slurm mode slurmd runs the jobs; agents beside it only report health
  // (their `start` would launch every rank a second time).
  if (!config.slurm_socket.empty()) {
    drain_modes.clear();
    return;
  }
  const core::Topology& topo = *topology;
  auto nodes_of = [&](const std::vector<core::GpuSlot>& ranks) {
    std::vector<std::string> out;
    std::set<NodeId> seen;
    for (const core::GpuSlot& slot : ranks) {
      if (seen.insert(slot.node).second) out.push_back(topo.node(slot.node).name);
    }
    return out;
  };
  auto send = [&](const std::string& node, const Json& m) { outbox.emplace_back(node, m.dump()); };
  auto start = [&](JobId id, const std::vector<core::GpuSlot>& ranks, int restart, int64_t step) {
    const core::JobRecord* job = core->job(id);
    if (job == nullptr || ranks.empty()) return;
    const std::string master = topo.node(ranks[0].node).name;
    auto addr = agents.find(master);
    std::map<std::string, Json> local;
    for (size_t r = 0; r < ranks.size(); ++r) {
      local[topo.node(ranks[r].node).name].push_back({{"rank", r}, {"gpu", ranks[r].gpu}});
    }
    const Json spec = common::JobSpecToJson(job->request.spec);
    for (auto& [node, mine] : local) {
      send(node, {{"type", "start"},
                  {"job", id},
                  {"restart_count", restart},
                  {"checkpoint_step", step},
                  {"world_size", ranks.size()},
                  {"master_addr",
                   addr != agents.end() && !addr->second.addr.empty() ? addr->second.addr : master},
                  {"master_port", 20000 + (id * 16 + restart) % 40000},
                  {"ranks", mine},
                  {"layout", spec["parallelism"]},
                  {"command", job->request.command}});
    }
    Run& run = runs[id];
    for (const std::string& old : run.nodes) {
      if (!local.count(old)) send(old, {{"type", "stop"}, {"job", id}, {"reason", "moved"}});
    }
    run = Run{restart, std::vector<bool>(ranks.size(), false), 0, nodes_of(ranks)};
  };
  for (const core::Command& c : commands) {
    if (const auto* x = std::get_if<core::StartJob>(&c)) {
      const core::JobRecord* job = core->job(x->id);
      start(x->id, x->ranks, job != nullptr ? job->restarts : 0,
            job != nullptr ? job->checkpoint_step : -1);
    } else if (const auto* x = std::get_if<core::RestartJob>(&c)) {
      start(x->id, x->ranks, x->restart_count, x->checkpoint_step);
    } else if (const auto* x = std::get_if<core::StopJob>(&c)) {
      auto it = runs.find(x->id);
      std::vector<std::string> nodes;
      if (it != runs.end()) {
        nodes = it->second.nodes;
        runs.erase(it);
      } else if (const core::JobRecord* job = core->job(x->id)) {
        nodes = nodes_of(job->ranks);
      }
      for (const std::string& n : nodes) {
        send(n, {{"type", "stop"}, {"job", x->id}, {"reason", x->reason}});
      }
    } else if (const auto* x = std::get_if<core::RequestCheckpoint>(&c)) {
      if (const core::JobRecord* job = core->job(x->id)) {
        for (const std::string& n : nodes_of(job->ranks)) {
          send(n, {{"type", "checkpoint"}, {"job", x->id}, {"reason", x->reason}});
        }
      }
    } else if (const auto* x = std::get_if<core::DrainNode>(&c)) {
      auto mode = drain_modes.find(topo.node(x->node).name);
      if (mode == drain_modes.end()) continue;
      if (mode->second != "wait") {
        send(topo.node(x->node).name,
             {{"type", "drain"}, {"mode", mode->second}, {"reason", x->reason}});
      }
      drain_modes.erase(mode);
    }
  }
}

}  // namespace topo::daemon
