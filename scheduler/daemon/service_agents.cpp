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
  if (type == "drained") return Status::Ok();
  return Status::Error("unknown message type \"" + type.substr(0, 40) + "\"");
}

void Service::AgentDisconnected(const std::string& node, TimeMs now) {
  ServiceState& s = *s_;
  s.now = std::max(s.now, now);
  auto it = s.agents.find(node);
  if (it != s.agents.end()) it->second.connected = false;
}

void Service::CheckLiveness(TimeMs now) {
  ServiceState& s = *s_;
  if (s.core == nullptr) return;
  s.now = std::max(s.now, now);
  const TimeMs limit =
      static_cast<TimeMs>(s.config.heartbeat_interval_ms) * s.config.missed_heartbeats_down;
  for (auto& [name, agent] : s.agents) {
    if (s.now - agent.last_seen < limit) continue;
    const NodeId n = s.topology->FindNode(name);
    if (n < 0) continue;
    const core::NodeState state = s.core->cluster().node_state(n);
    if (state == core::NodeState::kDown) continue;
    s.Step(core::NodeStateRequested{n, core::NodeState::kDown,
                                    "agent silent for " +
                                        std::to_string((s.now - agent.last_seen)) + " ms (" +
                                        (agent.connected ? "connected" : "disconnected") + ")"},
           "scheduler");
  }
}

std::vector<std::pair<std::string, std::string>> Service::TakeAgentMessages() {
  return std::exchange(s_->outbox, {});
}

void ServiceState::Dispatch(const std::vector<core::Command>& commands) {
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
                  {"master_addr", addr != agents.end() ? addr->second.addr : master},
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
      send(topo.node(x->node).name,
           {{"type", "drain"}, {"mode", "graceful"}, {"reason", x->reason}});
    }
  }
}

}  // namespace topo::daemon
