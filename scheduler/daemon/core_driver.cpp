// CoreDriver (core_driver.hpp).

#include "daemon/core_driver.hpp"

#include <charconv>
#include <chrono>
#include <future>
#include <system_error>

#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;

core::Result<std::vector<core::JobId>> CoreDriver::JobsByClientRequest(const std::string& user,
                                                                       const std::string& id) {
  core::Result<std::vector<core::JobId>> ids = store->JobsByClientRequest(user, id);
  if (!ids.ok()) return ids;
  for (const store::LogEntry& e : staged_) {
    if (const auto* s = std::get_if<core::JobSubmitted>(&e.event);
        s != nullptr && s->request.user == user && s->request.client_request_id == id) {
      ids.value().push_back(s->id);
    }
  }
  return ids;
}

const std::vector<core::Command>& CoreDriver::Step(const core::Event& event, std::string actor) {
  const auto t0 = std::chrono::steady_clock::now();
  store::LogEntry entry;
  entry.time_ms = now;
  entry.actor = std::move(actor);
  entry.event = event;
  entry.commands = core->Step(event, now);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bool placed = false;
  for (const core::Command& c : entry.commands) {
    if (std::holds_alternative<core::StartJob>(c) || std::holds_alternative<core::RestartJob>(c)) {
      placed = true;
    }
    if (const auto* n = std::get_if<core::NodeStateChanged>(&c)) {
      node_reason[topology->node(n->node).name] = n->reason;
    }
    if (const auto* j = std::get_if<core::JobStateChanged>(&c)) {
      if (const core::JobRecord* job = core->job(j->id)) waiting_.Changed(*job, j->state);
    }
  }
  if (placed && metrics_ != nullptr) metrics_->Placement(seconds);
  staged_.push_back(std::move(entry));
  return staged_.back().commands;
}

Result<std::vector<store::LogEntry>> CoreDriver::Commit() {
  if (!diverged.ok()) return diverged;
  if (staged_.empty()) return std::vector<store::LogEntry>{};
  const auto t0 = std::chrono::steady_clock::now();
  Result<store::AppendResult> r = store::AppendResult{};
  if (replicate) {
    // HA: the append to the replicated log runs on its own thread while
    // this one writes the same batch into the local transaction; the local
    // commit waits for etcd's answer and rolls back on an error, so this
    // store is never ahead of the log (docs/ha.md, Replicated log and
    // fencing). Both only read staged_ and the topology until joined.
    const int64_t first_seq = store->LastSeq() + 1;
    std::future<Status> replicated;
    try {
      replicated = std::async(std::launch::async, [this, first_seq] {
        return replicate(first_seq, staged_, *topology);
      });
    } catch (const std::system_error&) {
      // No thread to be had: the append first, then the local one, in series.
      if (Status s = replicate(first_seq, staged_, *topology); !s.ok()) {
        return Status::Error(s.message(), core::ErrorCode::kUnavailable);
      }
      std::promise<Status> done;
      done.set_value(Status::Ok());
      replicated = done.get_future();
    }
    r = store->Append(*topology, staged_, [&] { return replicated.get(); });
    // The local batch failed before asking: wait for the append all the
    // same (the thread reads staged_); the log may hold what this store
    // lacks, and the daemon stops and catches up as a standby.
    if (replicated.valid()) {
      if (Status s = replicated.get(); !s.ok() && !r.ok()) {
        return Status::Error(s.message(), core::ErrorCode::kUnavailable);
      }
    }
  } else {
    r = store->Append(*topology, staged_);
  }
  if (!r.ok()) return Status::Error(r.message(), core::ErrorCode::kUnavailable);
  if (metrics_ != nullptr) {
    metrics_->Commit(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     staged_.size());
  }
  // Terminal jobs now live in the store; the core forgets them.
  core->TakeFinishedJobs();
  return std::exchange(staged_, {});
}

std::optional<std::string> CoreDriver::JobTenant(core::JobId id) {
  if (core != nullptr) {
    if (const core::JobRecord* j = core->job(id)) return j->request.tenant;
  }
  Result<std::optional<store::JobRow>> row = store->GetJob(id);
  if (!row.ok() || !row.value()) return std::nullopt;
  return row.value()->tenant;
}

void WaitingJobs::Changed(const core::JobRecord& job, core::JobState state) {
  const bool now = state == core::JobState::kQueued || state == core::JobState::kHeld;
  auto it = waiting_.find(job.id);
  const bool was = it != waiting_.end() && it->second;
  if (now != was) {
    const int d = now ? 1 : -1;
    tenants_[job.request.tenant] += d;
    users_[job.request.user] += d;
  }
  if (core::IsTerminal(state)) {
    if (it != waiting_.end()) waiting_.erase(it);
  } else {
    waiting_[job.id] = now;
  }
}

void WaitingJobs::Clear() {
  waiting_.clear();
  tenants_.clear();
  users_.clear();
}

int WaitingJobs::OfTenant(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second;
}

int WaitingJobs::OfUser(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? 0 : it->second;
}

void CoreDriver::RecountWaiting() {
  waiting_.Clear();
  if (core == nullptr) return;
  for (const auto& [id, job] : core->jobs()) waiting_.Changed(job, job.state);
}

void CoreDriver::BuildCore() {
  core = std::make_unique<core::SchedulerCore>(*topology, scheduler_config);
  empty = std::make_unique<core::ClusterState>(*topology);
  core::PlacerOptions options = scheduler_config.placer_options;
  options.explain_shortfall = true;
  judge = core::MakePlacer(scheduler_config.placer, options);
  if (judge == nullptr) judge = core::MakePlacer("toposched", options);
}

Status CoreDriver::Rebuild(int64_t from_seq) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  epoch_from_seq = from_seq;
  snapshot_time = now;
  Result<std::vector<store::SnapshotRow>> rows = store->Snapshots(from_seq);
  if (!rows.ok()) return rows.status();
  snapshot_seq = rows.value().empty() ? 0 : rows.value().front().seq;
  std::string why_not;  // why the newest snapshots were not used
  for (const store::SnapshotRow& row : rows.value()) {
    BuildCore();
    Status s = core->Restore(row.state);
    if (s.ok()) {
      Result<store::ReplayReport> r = store->ReplayAfter(*core, row.seq);
      if (r.ok()) {
        replay = r.value();
        restored_seq = row.seq;
        rebuild_ms = elapsed_ms();
        log::Info("loaded snapshot at seq " + std::to_string(row.seq) + ", replayed " +
                      std::to_string(replay.events) + " events in " +
                      std::to_string(static_cast<int64_t>(rebuild_ms)) + " ms",
                  {{"snapshot_seq", row.seq},
                   {"events", replay.events},
                   {"ms", rebuild_ms},
                   {"jobs", core->jobs().size()}});
        return Status::Ok();
      }
      s = r.status();
    }
    log::Warn("snapshot at seq " + std::to_string(row.seq) + " not used: " + s.message() +
                  "; trying an older snapshot, else a full replay",
              {{"snapshot_seq", row.seq}});
    why_not = s.message();
  }
  Result<int64_t> first = store->FirstSeq();
  if (!first.ok()) return first.status();
  if (first.value() > from_seq) {
    return Status::Error("store " + store->path() + ": no snapshot restores (" +
                         (why_not.empty() ? std::string("none stored") : why_not) +
                         ") and the events before seq " + std::to_string(first.value()) +
                         " were compacted, so a full replay cannot rebuild the scheduler; "
                         "restore a backup (docs/operations.md) or run the release that wrote "
                         "the snapshot");
  }
  BuildCore();
  Result<store::ReplayReport> r = store->Replay(*core, from_seq);
  if (!r.ok()) return r.status();
  replay = r.value();
  restored_seq = 0;
  rebuild_ms = elapsed_ms();
  log::Info("no snapshot: replayed " + std::to_string(replay.events) + " events in " +
                std::to_string(static_cast<int64_t>(rebuild_ms)) + " ms",
            {{"events", replay.events}, {"ms", rebuild_ms}});
  return Status::Ok();
}

Status CoreDriver::LoadFromStore(DaemonConfig& config) {
  // The policy the log was written with wins over the config file's: a
  // replay must make the same decisions.
  Result<std::optional<std::string>> policy = store->GetMeta("policy");
  if (!policy.ok()) return policy.status();
  if (policy.value()) {
    if (Status p = ApplyPolicyJson(*policy.value(), config); !p.ok()) {
      return Status::Error("store " + store->path() + ": meta \"policy\": " + p.message());
    }
  }
  Result<core::SchedulerConfig> sc = config.SchedulerConfig();
  if (!sc.ok()) return sc.status();
  scheduler_config = sc.value();
  Result<std::optional<std::string>> topo_json = store->GetMeta("topology");
  if (!topo_json.ok()) return topo_json.status();
  if (!topo_json.value()) return Status::Ok();
  Result<core::Topology> t = common::ParseTopologyJson(*topo_json.value());
  if (!t.ok())
    return Status::Error("store " + store->path() + ": the stored topology: " + t.message());
  topology = std::make_unique<core::Topology>(std::move(t).value());
  Result<std::optional<std::string>> from = store->GetMeta("topology_from_seq");
  if (!from.ok()) return from.status();
  int64_t from_seq = 1;
  if (from.value()) {
    const std::string& text = *from.value();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), from_seq);
    if (ec != std::errc() || end != text.data() + text.size() || from_seq < 1) {
      return Status::Error("store " + store->path() + ": meta \"topology_from_seq\" is \"" +
                           text.substr(0, 24) + "\", not a seq (1 or more)");
    }
  }
  return Rebuild(from_seq);
}

Status CoreDriver::MaybeSnapshot(int64_t every_events, core::TimeMs every_ms) {
  if (core == nullptr || !staged_.empty()) return Status::Ok();
  const int64_t last = store->LastSeq();
  if (last <= snapshot_seq || last < epoch_from_seq) return Status::Ok();
  const bool by_count = every_events > 0 && last - snapshot_seq >= every_events;
  const bool by_time = every_ms > 0 && now - snapshot_time >= every_ms;
  if (!by_count && !by_time) return Status::Ok();
  // Due or failed, the next try waits a whole interval: a store that
  // cannot take a snapshot still takes the log.
  snapshot_seq = last;
  snapshot_time = now;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string state = core->Snapshot();
  Status s =
      store->WriteSnapshot(static_cast<int>(core::SchedulerCore::kSnapshotVersion), state, now);
  if (s.ok() && snapshot_written) snapshot_written();
  if (s.ok()) {
    log::Debug(
        "snapshot at seq " + std::to_string(last),
        {{"bytes", state.size()},
         {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count()}});
  }
  return s;
}

Result<int64_t> CoreDriver::CompactOnce(core::TimeMs retention_ms, int batch) {
  return store->CompactEvents(now - retention_ms, batch);
}

}  // namespace topo::daemon
