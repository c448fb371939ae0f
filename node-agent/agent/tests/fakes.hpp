#pragma once
// Test doubles for AgentCore (agent_core.hpp): a clock the test moves, a
// link that records what was sent (and parses it back with the protocol's
// own reader), a log that keeps its lines, and a runner whose ranks run
// until the test says they exit.

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "agent_core.hpp"
#include "rank_runner.hpp"
#include "topo/common/agent_protocol.hpp"

namespace topo::agent::testing {

class FakeClock final : public AgentClock {
 public:
  int64_t NowMs() const override { return now; }
  int64_t now = 1'000'000;
};

class FakeLink final : public AgentLink {
 public:
  bool Send(std::string text) override {
    if (!connected) return false;
    sent.push_back(std::move(text));
    return true;
  }
  void Registered(int ms) override {
    ++registrations;
    heartbeat_ms = ms;
  }
  void Drop() override { ++drops; }
  int drops = 0;
  // Every message sent, read back by the protocol's strict reader.
  std::vector<proto::AgentMessage> Messages() const {
    std::vector<proto::AgentMessage> out;
    for (const std::string& text : sent) {
      std::string field;
      core::Result<proto::AgentMessage> m = proto::ParseAgentMessage(text, &field);
      REQUIRE_MESSAGE(m.ok(), "the agent sent a message the protocol refuses: " << text);
      out.push_back(std::move(m).value());
    }
    return out;
  }
  template <class T>
  std::vector<T> Of() const {
    std::vector<T> out;
    for (const proto::AgentMessage& m : Messages()) {
      if (const T* t = std::get_if<T>(&m)) out.push_back(*t);
    }
    return out;
  }
  void Clear() { sent.clear(); }

  bool connected = true;
  std::vector<std::string> sent;
  int registrations = 0;
  int heartbeat_ms = 0;
};

class CaptureLog final : public AgentLog {
 public:
  void Line(const std::string&, LogLevel level, const std::string& text) override {
    lines.emplace_back(level, text);
  }
  bool Has(const std::string& part, std::optional<LogLevel> level = std::nullopt) const {
    for (const auto& [l, text] : lines) {
      if (text.find(part) != std::string::npos && (!level || *level == l)) return true;
    }
    return false;
  }
  std::string All() const {
    std::string out;
    for (const auto& entry : lines) out += entry.second + "\n";
    return out;
  }
  std::vector<std::pair<LogLevel, std::string>> lines;
};

// Ranks run from a successful Launch until the test ends them (Exit,
// ExitAll). Stop only records the request, as a real stop takes a while.
class FakeRunner final : public RankRunner {
 public:
  struct Job {
    JobLaunch launch;
    std::vector<int> running;  // global ranks still running
    bool stop_requested = false;
  };

  std::vector<RankInfo> Running() const override {
    std::vector<RankInfo> out;
    for (const auto& [id, job] : jobs) {
      for (int r : job.running) {
        RankInfo info;
        info.job_id = id;
        info.rank = r;
        info.pid = 4000 + r;
        info.running = true;
        out.push_back(info);
      }
    }
    return out;
  }
  std::optional<int> RestartCountOf(const std::string& job) const override {
    auto it = jobs.find(job);
    if (it == jobs.end()) return std::nullopt;
    return it->second.launch.restart_count;
  }
  core::Status CheckMasterPort(int port) override {
    port_checks.push_back(port);
    return port_check ? port_check(port) : core::Status::Ok();
  }
  LaunchOutcome Launch(const JobLaunch& launch, int64_t checkpoint_step) override {
    launches.emplace_back(launch, checkpoint_step);
    LaunchOutcome out;
    if (!outcomes.empty()) {
      out = outcomes.front();
      outcomes.erase(outcomes.begin());
    }
    // The outcome of ranks started in the background: they run already
    // (and may have exited).
    if (out.kind == LaunchOutcome::Kind::kStarted && background.erase(launch.job_id) > 0) {
      if (checkpoint_step >= 0) out.restart_step = checkpoint_step;
      return out;
    }
    if (out.kind == LaunchOutcome::Kind::kStarted) {
      Job& j = jobs[launch.job_id];
      j.launch = launch;
      j.running.clear();
      j.stop_requested = false;
      for (const LocalRankSpec& r : launch.ranks) j.running.push_back(r.rank);
      if (checkpoint_step >= 0) out.restart_step = checkpoint_step;
    }
    // As the real runner: a copy it started, or ranks it starts in the
    // background, are underway until the test ends them; starting ranks
    // count as running meanwhile.
    if (out.staging || out.starting) underway[launch.job_id] = out.reason;
    if (out.starting) {
      background.insert(launch.job_id);
      Job& j = jobs[launch.job_id];
      j.launch = launch;
      j.running.clear();
      j.stop_requested = false;
      for (const LocalRankSpec& r : launch.ranks) j.running.push_back(r.rank);
    }
    return out;
  }
  core::Status Stop(const std::string& job, int grace_ms) override {
    stops.emplace_back(job, grace_ms);
    auto it = jobs.find(job);
    if (it == jobs.end()) return core::Status::Error("no job " + job);
    it->second.stop_requested = true;
    return core::Status::Ok();
  }
  core::Status RequestCheckpoint(const std::string& job) override {
    checkpoint_requests.push_back(job);
    return jobs.count(job) ? core::Status::Ok() : core::Status::Error("no job " + job);
  }
  std::vector<SupervisorEvent> Poll() override {
    std::vector<SupervisorEvent> out;
    out.swap(events);
    return out;
  }
  std::optional<int64_t> NewestCompleteStep(const std::string& job) const override {
    auto it = complete.find(job);
    return it == complete.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::optional<int64_t> NewestPersistedStep(const std::string& job) const override {
    auto it = persisted.find(job);
    return it == persisted.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  bool HasPersistentTier() const override { return persistent_tier; }
  std::optional<std::string> Underway(const std::string& job) const override {
    auto it = underway.find(job);
    return it == underway.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  proto::LogsReply ReadLog(const proto::LogsRequest& request) override {
    log_requests.push_back(request);
    proto::LogsReply reply;
    if (log_error) {
      reply.error = *log_error;
      return reply;
    }
    reply.offset = 0;
    reply.next_offset = 6;
    reply.size = 6;
    reply.data = "hello\n";
    return reply;
  }

  // A rank of `job` ends; with the last one, the job's kJobFinished.
  void Exit(const std::string& job, int rank, int code, bool signaled = false) {
    Job& j = jobs.at(job);
    auto it = std::find(j.running.begin(), j.running.end(), rank);
    REQUIRE(it != j.running.end());
    j.running.erase(it);
    SupervisorEvent e{EventKind::kRankExited, job, {}, -1, {}};
    e.exit.job_id = job;
    e.exit.rank = rank;
    e.exit.pid = 4000 + rank;
    e.exit.signaled = signaled;
    e.exit.signal = signaled ? code : 0;
    e.exit.exit_code = signaled ? 0 : code;
    e.exit.stopped = j.stop_requested;
    events.push_back(e);
    if (j.running.empty())
      events.push_back(SupervisorEvent{EventKind::kJobFinished, job, {}, -1, {}});
  }
  // Every running rank of job ends as a stop ends them (SIGTERM).
  void ExitAll(const std::string& job) {
    const std::vector<int> ranks = jobs.at(job).running;
    for (int r : ranks) Exit(job, r, 15, /*signaled=*/true);
  }

  std::map<std::string, Job> jobs;
  std::vector<std::pair<JobLaunch, int64_t>> launches;
  std::vector<LaunchOutcome> outcomes;  // the next Launch()es' outcomes (default: started)
  // Underway(job) answers these; a staging or starting outcome adds its
  // job, a test erases it to end the copy or the start.
  std::map<std::string, std::string> underway;
  std::set<std::string> background;  // jobs whose last outcome was `starting`
  std::vector<std::pair<std::string, int>> stops;
  std::vector<std::string> checkpoint_requests;
  std::vector<int> port_checks;
  std::function<core::Status(int)> port_check;
  std::vector<SupervisorEvent> events;
  std::map<std::string, int64_t> complete, persisted;
  bool persistent_tier = true;
  std::vector<proto::LogsRequest> log_requests;
  std::optional<std::string> log_error;  // ReadLog answers this error when set
};

}  // namespace topo::agent::testing
