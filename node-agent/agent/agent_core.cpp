// AgentCore (agent_core.hpp): registration, reports, GPU and runner events,
// logs, errors. Starts, stops and drains: agent_core_jobs.cpp.

#include "agent_core.hpp"

#include <algorithm>
#include <charconv>
#include <type_traits>
#include <utility>
#include <variant>

namespace topo::agent {

std::optional<int64_t> JobNumber(const std::string& job_id) {
  int64_t v = 0;
  const char* end = job_id.data() + job_id.size();
  auto [p, ec] = std::from_chars(job_id.data(), end, v);
  if (ec != std::errc() || p != end || v < 1 || v > proto::kMaxJobId) return std::nullopt;
  return v;
}

AgentCore::AgentCore(std::string node, const AgentCoreOptions& options, RankRunner& runner,
                     gpu::GpuBackend& gpus, AgentLink& link, const AgentClock& clock, AgentLog& log,
                     AgentObserver* observer)
    : node_(std::move(node)),
      options_(options),
      runner_(runner),
      gpus_(gpus),
      link_(link),
      clock_(clock),
      log_(log),
      observer_(observer) {}

void AgentCore::Log(LogLevel level, const std::string& text) const {
  log_.Line(node_, level, text);
}

void AgentCore::Reset() {
  registered_ = false;
  heartbeat_ms_ = 1000;
  seq_ = 0;
  last_refusal_.clear();
  queued_reports_.clear();
  pending_.clear();
  restart_counts_.clear();
  drain_ = DrainPhase::kNone;
  drain_baseline_.clear();
}

// ------------------------------------------------------------------ connection

void AgentCore::OnConnected() {
  registered_ = false;
  last_refusal_.clear();
  proto::Register r;
  r.node = node_;
  r.addr = options_.addr;
  r.agent = options_.agent_version;
  for (const gpu::GpuInfo& g : gpus_.Inventory().gpus) {
    r.gpus.push_back(
        proto::GpuInfo{g.index, g.name, g.uuid, static_cast<int64_t>(g.memory_total >> 20)});
  }
  for (const RankInfo& rank : runner_.Running()) {
    const auto id = JobNumber(rank.job_id);
    if (!id || rank.pid <= 0) continue;  // not a job the scheduler gave
    r.ranks.push_back(proto::RunningRank{*id, rank.rank, rank.pid});
  }
  link_.Send(proto::WriteAgentMessage(r));
}

void AgentCore::OnDisconnected() { registered_ = false; }

void AgentCore::Beat() {
  if (registered_) link_.Send(proto::WriteAgentMessage(proto::Heartbeat{++seq_}));
}

void AgentCore::Heartbeat() {
  Beat();
  PollGpus();
  Tick();
}

void AgentCore::Report(const proto::AgentMessage& message) {
  std::string text = proto::WriteAgentMessage(message);
  if (registered_ && link_.Send(text)) return;
  const std::optional<int64_t> job = std::visit(
      [](const auto& m) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::RankExited> ||
                      std::is_same_v<T, proto::CheckpointReport> ||
                      std::is_same_v<T, proto::LaunchFailed>) {
          return m.job;
        } else {
          return std::nullopt;
        }
      },
      message);
  if (queued_reports_.size() >= options_.max_queued_reports && !queued_reports_.empty()) {
    // Keep the newest: drop a tenth of the oldest at once, not one per report.
    const size_t drop = std::max<size_t>(1, queued_reports_.size() / 10);
    queued_reports_.erase(queued_reports_.begin(),
                          queued_reports_.begin() + static_cast<std::ptrdiff_t>(drop));
    Log(LogLevel::kWarning, "dropped the " + std::to_string(drop) +
                                " oldest report(s) held while disconnected (at most " +
                                std::to_string(options_.max_queued_reports) + " are held)");
  }
  queued_reports_.push_back(HeldReport{job, std::move(text)});
}

// ------------------------------------------------------------------ messages

void AgentCore::OnText(std::string_view text) {
  std::string field;
  core::Result<proto::SchedulerMessage> parsed = proto::ParseSchedulerMessage(text, &field);
  if (!parsed.ok()) {
    Log(LogLevel::kWarning, "ignoring a scheduler message the protocol does not allow (field " +
                                (field.empty() ? std::string("-") : field) +
                                "): " + parsed.message() +
                                " [first bytes: " + std::string(text.substr(0, 120)) + "]");
    return;
  }
  if (observer_ != nullptr) observer_->OnSchedulerMessage(node_, parsed.value());
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::Registered>) {
          HandleRegistered(m);
        } else if constexpr (std::is_same_v<T, proto::Start>) {
          HandleStart(m);
        } else if constexpr (std::is_same_v<T, proto::Stop>) {
          HandleStop(std::to_string(m.job), m.reason);
        } else if constexpr (std::is_same_v<T, proto::CheckpointRequest>) {
          HandleCheckpoint(m);
        } else if constexpr (std::is_same_v<T, proto::Drain>) {
          HandleDrain(m);
        } else if constexpr (std::is_same_v<T, proto::LogsRequest>) {
          HandleLogs(m);
        } else {
          static_assert(std::is_same_v<T, proto::Error>);
          HandleError(m);
        }
      },
      parsed.value());
  // What the message set going (a stop of the earlier run, a checkpoint)
  // may already be done.
  Tick();
}

void AgentCore::HandleRegistered(const proto::Registered& m) {
  // HA (docs/ha.md): a replica that answers with an older leadership term
  // than one seen before was deposed and does not know it yet (paused past
  // its lease): nothing it says is followed, and the agent moves on.
  if (m.term) {
    if (*m.term < newest_term_) {
      Log(LogLevel::kWarning, "refusing a scheduler of leadership term " + std::to_string(*m.term) +
                                  ": term " + std::to_string(newest_term_) +
                                  " leads now; trying the next scheduler address");
      link_.Drop();
      return;
    }
    if (*m.term > newest_term_ && newest_term_ > 0) {
      Log(LogLevel::kInfo, "the scheduler's leadership moved to term " + std::to_string(*m.term) +
                               " (was " + std::to_string(newest_term_) + ")");
    }
    newest_term_ = *m.term;
  }
  registered_ = true;
  heartbeat_ms_ = options_.heartbeat_ms > 0 ? options_.heartbeat_ms : m.heartbeat_interval_ms;
  std::string keep;
  for (int64_t id : m.keep) keep += (keep.empty() ? "" : ",") + std::to_string(id);
  Log(LogLevel::kInfo,
      "registered; heartbeat every " + std::to_string(heartbeat_ms_) + " ms; keep [" + keep + "]");
  Reconcile(m.keep);
  std::vector<HeldReport> held = std::exchange(queued_reports_, {});
  // About jobs the scheduler no longer runs here: old news it would refuse.
  const std::set<int64_t> kept(m.keep.begin(), m.keep.end());
  size_t dropped = 0;
  std::erase_if(held, [&](const HeldReport& r) {
    const bool stale = r.job && kept.count(*r.job) == 0;
    dropped += stale ? 1 : 0;
    return stale;
  });
  if (dropped > 0) {
    Log(LogLevel::kInfo, "dropped " + std::to_string(dropped) +
                             " held report(s) about jobs the scheduler no longer runs here");
  }
  for (size_t i = 0; i < held.size(); ++i) {
    if (!link_.Send(held[i].text)) {
      // Lost again while flushing: keep the rest for the next registration.
      queued_reports_.assign(held.begin() + static_cast<std::ptrdiff_t>(i), held.end());
      break;
    }
  }
  link_.Registered(heartbeat_ms_);
}

void AgentCore::HandleCheckpoint(const proto::CheckpointRequest& m) {
  const std::string job = std::to_string(m.job);
  core::Status st = runner_.RequestCheckpoint(job);
  Log(LogLevel::kInfo, "checkpoint of job " + job + " requested (" + m.reason + ")" +
                           (st.ok() ? "" : ": " + st.message()));
}

void AgentCore::HandleLogs(const proto::LogsRequest& m) {
  proto::LogsReply reply = runner_.ReadLog(m);
  reply.req = m.req;
  // A rank of a launch still waiting here has no log yet: say why.
  if (auto p = pending_.find(std::to_string(m.job)); reply.error && p != pending_.end()) {
    reply.error = "rank " + std::to_string(m.rank) + " has not started on this node yet (" +
                  (p->second.waiting_for.empty() ? std::string("its launch is about to start")
                                                 : "its launch waits: " + p->second.waiting_for) +
                  ")";
  }
  // An answer belongs to this connection's request: never held.
  link_.Send(proto::WriteAgentMessage(reply));
}

void AgentCore::HandleError(const proto::Error& m) {
  // One line for the logs (the daemon's refusals may end with a newline).
  last_refusal_ = m.message;
  for (char& c : last_refusal_) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  while (!last_refusal_.empty() && last_refusal_.back() == ' ') last_refusal_.pop_back();
  Log(LogLevel::kWarning,
      "the scheduler refused " + (m.refused.empty() ? std::string("a message") : m.refused) +
          (m.field.empty() ? std::string() : " (field " + m.field + ")") + ": " + last_refusal_);
}

// ------------------------------------------------------------------ events

int AgentCore::RestartCountOf(const std::string& job) {
  // Ranks started in the background may exit before their launch's outcome
  // is read: they belong to that launch's run.
  if (auto p = pending_.find(job); p != pending_.end() && p->second.starting) {
    return p->second.launch.restart_count;
  }
  auto it = restart_counts_.find(job);
  if (it != restart_counts_.end()) return it->second;
  const int rc = runner_.RestartCountOf(job).value_or(0);  // an adopted job's saved count
  restart_counts_[job] = rc;
  return rc;
}

void AgentCore::PollRunner() {
  // Node mode: jobs whose node process's failure is reported already (it
  // comes once per rank, in one poll).
  std::set<std::string> node_failures;
  for (const SupervisorEvent& e : runner_.Poll()) {
    const auto id = JobNumber(e.job_id);
    switch (e.kind) {
      case EventKind::kRankExited: {
        const RankExit& x = e.exit;
        proto::RankExited m;
        m.job = id.value_or(0);
        m.rank = x.rank;
        m.restart_count = RestartCountOf(e.job_id);
        m.exit_code = x.signaled ? 128 + x.signal : x.exit_code;
        m.signal = x.signaled ? x.signal : 0;
        std::string how = x.signaled ? "signal " + std::to_string(x.signal)
                                     : "exit code " + std::to_string(x.exit_code);
        if (!x.exit_status_known) {
          // Adopted, not our child: how it ended is unknown; reported as a failure.
          m.exit_code = -1;
          m.signal = 0;
          m.status_known = false;
          how = "status unknown (adopted)";
        }
        Log(LogLevel::kInfo, "job " + e.job_id + " rank " + std::to_string(x.rank) + " (pid " +
                                 std::to_string(x.pid) + ", restart " +
                                 std::to_string(m.restart_count) + ") ended: " + how +
                                 (x.stopped ? ", after a stop" : ""));
        // Ranks the agent stopped (the scheduler's stop, a restart, a drain,
        // a keep list) are not news; reporting them could also name a job
        // the scheduler has already forgotten.
        const bool failed = m.exit_code != 0 || m.signal != 0 || !m.status_known;
        if (failed && x.whole_node && !node_failures.insert(e.job_id).second) break;
        if (id && !x.stopped) Report(m);
        break;
      }
      case EventKind::kCheckpointComplete:
      case EventKind::kCheckpointPersisted: {
        const bool local = e.kind == EventKind::kCheckpointComplete;
        Log(LogLevel::kInfo, "job " + e.job_id + ": checkpoint step " + std::to_string(e.step) +
                                 (local ? " complete (local)" : " persisted"));
        if (id) {
          Report(proto::CheckpointReport{
              *id, e.step,
              local ? proto::CheckpointTier::kLocal : proto::CheckpointTier::kPersistent});
        }
        break;
      }
      case EventKind::kPersistFailed:
        Log(LogLevel::kWarning, "job " + e.job_id + ": copying checkpoint step " +
                                    std::to_string(e.step) +
                                    " to the persistent tier failed: " + e.message);
        break;
      case EventKind::kJobFinished:
        Log(LogLevel::kInfo, "job " + e.job_id + ": every local rank has exited" +
                                 (e.message.empty() ? std::string() : " (" + e.message + ")"));
        // A launch waiting for this run keeps its own count.
        if (pending_.count(e.job_id) == 0) restart_counts_.erase(e.job_id);
        break;
    }
  }
}

void AgentCore::PollGpus() {
  for (const gpu::HealthEvent& e : gpus_.Poll(clock_.NowMs())) {
    Log(LogLevel::kInfo, "GPU event: " + gpu::DescribeEvent(e));
    // Thermal throttling that stopped is followed by `cleared` when nothing
    // else is wrong: the scheduler hears of the GPU then.
    const std::optional<core::GpuEvent> ev = gpu::ToCoreEvent(e, 0);
    if (!ev) continue;
    Report(proto::GpuEventReport{ev->gpu, ev->kind, std::max<int64_t>(0, ev->code)});
  }
}

void AgentCore::Tick() {
  PollRunner();
  TryPendingLaunches();
  DrainProgress();
}

std::set<std::string> AgentCore::RunningJobs() const {
  std::set<std::string> jobs;
  for (const RankInfo& r : runner_.Running()) jobs.insert(r.job_id);
  return jobs;
}

bool AgentCore::Runs(const std::string& job) const {
  for (const RankInfo& r : runner_.Running()) {
    if (r.job_id == job) return true;
  }
  return false;
}

}  // namespace topo::agent
