// CoreDriver (core_driver.hpp).

#include "daemon/core_driver.hpp"

#include <chrono>

namespace topo::daemon {

using core::Result;
using core::Status;

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
  if (staged_.empty()) return std::vector<store::LogEntry>{};
  const auto t0 = std::chrono::steady_clock::now();
  Result<store::AppendResult> r = store->Append(*topology, staged_);
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

}  // namespace topo::daemon
