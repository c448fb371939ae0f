// CoreDriver (core_driver.hpp).

#include "daemon/loop/core_driver.hpp"

#include <charconv>
#include <chrono>
#include <future>
#include <system_error>

#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "topo/common/base64.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;

core::Result<std::vector<core::JobId>> CoreDriver::JobsByClientRequest(
    const std::string& user, const std::string& id) const {
  core::Result<std::vector<core::JobId>> ids = store_->JobsByClientRequest(user, id);
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
  entry.time_ms = now_;
  entry.actor = std::move(actor);
  entry.event = event;
  entry.commands = core_->Step(event, now_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bool placed = false;
  for (const core::Command& c : entry.commands) {
    if (std::holds_alternative<core::StartJob>(c) || std::holds_alternative<core::RestartJob>(c)) {
      placed = true;
    }
    if (const auto* n = std::get_if<core::NodeStateChanged>(&c)) {
      node_reason_[topology_->node(n->node).name] = n->reason;
    }
    if (const auto* j = std::get_if<core::JobStateChanged>(&c)) {
      if (const core::JobRecord* job = core_->job(j->id)) waiting_.Changed(*job, j->state);
    }
  }
  if (placed && metrics_ != nullptr) metrics_->Placement(seconds);
  staged_.push_back(std::move(entry));
  return staged_.back().commands;
}

Result<std::vector<store::LogEntry>> CoreDriver::Commit() {
  if (!diverged_.ok()) return diverged_;
  if (staged_.empty()) return std::vector<store::LogEntry>{};
  const auto t0 = std::chrono::steady_clock::now();
  Result<store::AppendResult> r = store::AppendResult{};
  if (replicate_) {
    // HA: the append to the replicated log runs on its own thread while
    // this one writes the same batch into the local transaction; the local
    // commit waits for etcd's answer and rolls back on an error, so this
    // store is never ahead of the log (docs/ha.md, Replicated log and
    // fencing). Both only read staged_ and the topology until joined.
    const int64_t first_seq = store_->LastSeq() + 1;
    std::future<Status> replicated;
    try {
      replicated = std::async(std::launch::async, [this, first_seq] {
        return replicate_(first_seq, staged_, *topology_);
      });
    } catch (const std::system_error&) {
      // No thread to be had: the append first, then the local one, in series.
      if (Status s = replicate_(first_seq, staged_, *topology_); !s.ok()) {
        return Status::Error(s.message(), core::ErrorCode::kUnavailable);
      }
      std::promise<Status> done;
      done.set_value(Status::Ok());
      replicated = done.get_future();
    }
    r = store_->Append(*topology_, staged_, [&] { return replicated.get(); });
    // The local batch failed before asking: wait for the append all the
    // same (the thread reads staged_); the log may hold what this store
    // lacks, and the daemon stops and catches up as a standby.
    if (replicated.valid()) {
      if (Status s = replicated.get(); !s.ok() && !r.ok()) {
        return Status::Error(s.message(), core::ErrorCode::kUnavailable);
      }
    }
  } else {
    r = store_->Append(*topology_, staged_);
  }
  if (!r.ok()) return Status::Error(r.message(), core::ErrorCode::kUnavailable);
  if (metrics_ != nullptr) {
    metrics_->Commit(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     staged_.size());
  }
  // Terminal jobs now live in the store; the core forgets them.
  core_->TakeFinishedJobs();
  return std::exchange(staged_, {});
}

std::optional<std::string> CoreDriver::JobTenant(core::JobId id) const {
  if (core_ != nullptr) {
    if (const core::JobRecord* j = core_->job(id)) return j->request.tenant;
  }
  Result<std::optional<store::JobRow>> row = store_->GetJob(id);
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
  if (core_ == nullptr) return;
  for (const auto& [id, job] : core_->jobs()) waiting_.Changed(job, job.state);
}

void CoreDriver::AttachStore(std::unique_ptr<store::Store> store, core::TimeMs now) {
  store_ = std::move(store);
  now_ = std::max(now, store_->LastTime());
}

const std::string& CoreDriver::NodeReason(const std::string& node) const {
  static const std::string kNone;
  auto it = node_reason_.find(node);
  return it == node_reason_.end() ? kNone : it->second;
}

Status CoreDriver::CheckFeasible(const core::JobSpec& spec) const {
  return core_->CheckFeasible(spec);
}

void CoreDriver::BuildCore() {
  core_ = std::make_unique<core::SchedulerCore>(*topology_, scheduler_config_);
}

void CoreDriver::StartEpoch(std::unique_ptr<core::Topology> topology,
                            std::unique_ptr<core::SchedulerCore> core) {
  const bool carried = core != nullptr;
  core_.reset();
  topology_ = std::move(topology);
  if (carried) {
    core_ = std::move(core);
  } else {
    BuildCore();
  }
  // Its snapshots start after the import.
  epoch_from_seq_ = store_->LastSeq() + 1;
  snapshot_seq_ = store_->LastSeq();
  snapshot_time_ = now_;
  if (!carried) {
    node_reason_.clear();
    waiting_.Clear();
    return;
  }
  // The jobs go on: the reasons of the nodes that remain stay.
  for (auto it = node_reason_.begin(); it != node_reason_.end();) {
    it = topology_->FindNode(it->first) < 0 ? node_reason_.erase(it) : std::next(it);
  }
}

void CoreDriver::SampleUtilization(core::TimeMs now) {
  if (core_ == nullptr) return;
  utilization_.push_back({now, core_->cluster().total_busy_gpus(), topology_->total_gpus()});
  while (utilization_.size() > 24 * 60) utilization_.pop_front();
}

Status CoreDriver::ReplicateAuth() {
  if (!replicate_auth_) return Status::Ok();
  Result<std::string> value = store_->ExportAuth();
  Status st = value.ok() ? replicate_auth_(value.value()) : value.status();
  if (!st.ok()) {
    MarkDiverged(Status::Error("the users and tokens changed here but not in etcd (" +
                                   st.message() + "); stopping, to take etcd's as a standby",
                               core::ErrorCode::kUnavailable));
  }
  return st;
}

Status CoreDriver::PublishAuth() {
  if (!replicate_auth_) return Status::Ok();
  Result<std::string> value = store_->ExportAuth();
  if (!value.ok()) return value.status();
  return replicate_auth_(value.value());
}

Status CoreDriver::ReplicateImport(int64_t from_seq,
                                   std::span<const std::pair<std::string, std::string>> meta) {
  if (!replicate_epoch_) return Status::Ok();
  return replicate_epoch_(from_seq, meta);
}

Status CoreDriver::Rebuild(std::unique_ptr<core::Topology> topology, int64_t from_seq) {
  topology_ = std::move(topology);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  epoch_from_seq_ = from_seq;
  snapshot_time_ = now_;
  Result<std::vector<store::SnapshotRow>> rows = store_->Snapshots(from_seq);
  if (!rows.ok()) return rows.status();
  snapshot_seq_ = rows.value().empty() ? 0 : rows.value().front().seq;
  std::string why_not;  // why the newest snapshots were not used
  for (const store::SnapshotRow& row : rows.value()) {
    BuildCore();
    Status s = core_->Restore(row.state);
    if (s.ok()) {
      Result<store::ReplayReport> r = store_->ReplayAfter(*core_, row.seq);
      if (r.ok()) {
        replay_ = r.value();
        restored_seq_ = row.seq;
        rebuild_ms_ = elapsed_ms();
        core_->TakeFinishedJobs();
        log::Info("loaded snapshot at seq " + std::to_string(row.seq) + ", replayed " +
                      std::to_string(replay_.events) + " events in " +
                      std::to_string(static_cast<int64_t>(rebuild_ms_)) + " ms",
                  {{"snapshot_seq", row.seq},
                   {"events", replay_.events},
                   {"ms", rebuild_ms_},
                   {"jobs", core_->jobs().size()}});
        return Status::Ok();
      }
      s = r.status();
    }
    log::Warn("snapshot at seq " + std::to_string(row.seq) + " not used: " + s.message() +
                  "; trying an older snapshot, else a full replay",
              {{"snapshot_seq", row.seq}});
    why_not = s.message();
  }
  // An epoch that began with the state carried over from the one before it
  // (a topology change while jobs ran) starts from that state.
  Result<std::optional<std::string>> base = store_->GetMeta("topology_base");
  if (!base.ok()) return base.status();
  if (base.value() && !base.value()->empty()) {
    Result<std::string> bytes = common::Base64Decode(*base.value());
    if (!bytes.ok()) {
      return Status::Error("store " + store_->path() +
                           ": meta \"topology_base\": " + bytes.message());
    }
    BuildCore();
    if (Status s = core_->Restore(bytes.value()); !s.ok()) {
      return Status::Error("store " + store_->path() +
                           ": the state the topology change carried over (meta "
                           "\"topology_base\") does not restore: " +
                           s.message() + (why_not.empty() ? "" : "; newer snapshots: " + why_not));
    }
    Result<store::ReplayReport> r = store_->ReplayAfter(*core_, from_seq - 1);
    if (!r.ok()) return r.status();
    replay_ = r.value();
    restored_seq_ = from_seq - 1;
    rebuild_ms_ = elapsed_ms();
    core_->TakeFinishedJobs();
    log::Info("restored the state carried over by the topology change, replayed " +
                  std::to_string(replay_.events) + " events in " +
                  std::to_string(static_cast<int64_t>(rebuild_ms_)) + " ms",
              {{"events", replay_.events}, {"ms", rebuild_ms_}});
    return Status::Ok();
  }
  Result<int64_t> first = store_->FirstSeq();
  if (!first.ok()) return first.status();
  if (first.value() > from_seq) {
    return Status::Error("store " + store_->path() + ": no snapshot restores (" +
                         (why_not.empty() ? std::string("none stored") : why_not) +
                         ") and the events before seq " + std::to_string(first.value()) +
                         " were compacted, so a full replay cannot rebuild the scheduler; "
                         "restore a backup (docs/operations.md) or run the release that wrote "
                         "the snapshot");
  }
  BuildCore();
  Result<store::ReplayReport> r = store_->Replay(*core_, from_seq);
  if (!r.ok()) return r.status();
  replay_ = r.value();
  restored_seq_ = 0;
  rebuild_ms_ = elapsed_ms();
  core_->TakeFinishedJobs();
  log::Info("no snapshot: replayed " + std::to_string(replay_.events) + " events in " +
                std::to_string(static_cast<int64_t>(rebuild_ms_)) + " ms",
            {{"events", replay_.events}, {"ms", rebuild_ms_}});
  return Status::Ok();
}

Status CoreDriver::LoadFromStore(DaemonConfig& config) {
  // The policy the log was written with wins over the config file's: a
  // replay must make the same decisions.
  Result<std::optional<std::string>> policy = store_->GetMeta("policy");
  if (!policy.ok()) return policy.status();
  if (policy.value()) {
    if (Status p = ApplyPolicyJson(*policy.value(), config); !p.ok()) {
      return Status::Error("store " + store_->path() + ": meta \"policy\": " + p.message());
    }
  }
  Result<core::SchedulerConfig> sc = config.SchedulerConfig();
  if (!sc.ok()) return sc.status();
  SetSchedulerConfig(sc.value());
  Result<std::optional<std::string>> topo_json = store_->GetMeta("topology");
  if (!topo_json.ok()) return topo_json.status();
  if (!topo_json.value()) return Status::Ok();
  Result<core::Topology> t = common::ParseTopologyJson(*topo_json.value());
  if (!t.ok()) {
    return Status::Error("store " + store_->path() + ": the stored topology: " + t.message());
  }
  Result<std::optional<std::string>> from = store_->GetMeta("topology_from_seq");
  if (!from.ok()) return from.status();
  int64_t from_seq = 1;
  if (from.value()) {
    const std::string& text = *from.value();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), from_seq);
    if (ec != std::errc() || end != text.data() + text.size() || from_seq < 1) {
      return Status::Error("store " + store_->path() + ": meta \"topology_from_seq\" is \"" +
                           text.substr(0, 24) + "\", not a seq (1 or more)");
    }
  }
  return Rebuild(std::make_unique<core::Topology>(std::move(t).value()), from_seq);
}

Status CoreDriver::MaybeSnapshot(int64_t every_events, core::TimeMs every_ms) {
  if (core_ == nullptr || !staged_.empty()) return Status::Ok();
  const int64_t last = store_->LastSeq();
  if (last <= snapshot_seq_ || last < epoch_from_seq_) return Status::Ok();
  const bool by_count = every_events > 0 && last - snapshot_seq_ >= every_events;
  const bool by_time = every_ms > 0 && now_ - snapshot_time_ >= every_ms;
  if (!by_count && !by_time) return Status::Ok();
  // Due or failed, the next try waits a whole interval: a store that
  // cannot take a snapshot still takes the log.
  snapshot_seq_ = last;
  snapshot_time_ = now_;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string state = core_->Snapshot();
  Status s =
      store_->WriteSnapshot(static_cast<int>(core::SchedulerCore::kSnapshotVersion), state, now_);
  if (s.ok() && snapshot_written_) snapshot_written_();
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
  return store_->CompactEvents(now_ - retention_ms, batch);
}

}  // namespace topo::daemon
