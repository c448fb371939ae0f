// NodeSets: partitions and reservations (node_sets.hpp).

#include "topo/core/node_sets.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/job.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::core {

namespace {

constexpr size_t kMaxTenantBytes = 256;
constexpr int kMaxPriorityTier = 1000;
// A memo of fences past this many entries is cleared (distinct ones are few).
constexpr size_t kMaxFenceMemo = 4096;

std::string Join(const std::vector<std::string>& names, size_t at_most = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > at_most) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

template <typename M>
std::vector<std::string> Names(const M& m) {
  std::vector<std::string> out;
  for (const auto& [name, v] : m) out.push_back(name);
  return out;
}

std::string Hours(TimeMs ms) {
  if (ms % kHour == 0) return std::to_string(ms / kHour) + " h";
  if (ms % kMinute == 0) return std::to_string(ms / kMinute) + " min";
  return std::to_string(ms / kSecond) + " s";
}

Status CheckNodes(const std::vector<std::string>& nodes, const Topology& topo) {
  if (nodes.empty()) {
    return Status::Error(
               "nodes: a node set needs at least one node (a hostlist such as n[001-016])")
        .WithField("nodes");
  }
  if (nodes.size() > kMaxSelectionNames) {
    return Status::Error("nodes: at most " + std::to_string(kMaxSelectionNames) + " names",
                         ErrorCode::kTooLarge)
        .WithField("nodes");
  }
  for (const std::string& n : nodes) {
    if (n.empty() || n.size() > kMaxSelectionNameBytes) {
      return Status::Error("nodes: a node name is 1 to " + std::to_string(kMaxSelectionNameBytes) +
                           " bytes")
          .WithField("nodes");
    }
    if (topo.FindNode(n) < 0) {
      return Status::Error("nodes: node '" + n + "' is not in the topology (topo nodes lists them)")
          .WithField("nodes");
    }
  }
  return Status::Ok();
}

Status CheckTenants(const std::vector<std::string>& tenants) {
  if (tenants.size() > kMaxNodeSetTenants) {
    return Status::Error("tenants: at most " + std::to_string(kMaxNodeSetTenants) + " names",
                         ErrorCode::kTooLarge)
        .WithField("tenants");
  }
  for (const std::string& t : tenants) {
    if (t.empty() || t.size() > kMaxTenantBytes || t.front() == '/' || t.back() == '/') {
      return Status::Error("tenants: '" + t + "' is not a tenant path (org/team/user, 1 to " +
                           std::to_string(kMaxTenantBytes) + " bytes)")
          .WithField("tenants");
    }
  }
  return Status::Ok();
}

bool Overlap(TimeMs a0, TimeMs a1, TimeMs b0, TimeMs b1) { return a0 < b1 && b0 < a1; }

}  // namespace

Status ValidateNodeSetName(const std::string& name, const char* field) {
  const std::string f = field;
  if (name.empty() || name.size() > kMaxNodeSetNameBytes) {
    return Status::Error(f + ": a name is 1 to " + std::to_string(kMaxNodeSetNameBytes) +
                         " characters of A-Z a-z 0-9 . _ -")
        .WithField(f);
  }
  if (name.front() == '-' || name.front() == '.') {
    return Status::Error(f + ": '" + name + "' may not start with '-' or '.'").WithField(f);
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::Error(f + ": '" + name + "' has a character outside A-Z a-z 0-9 . _ -")
          .WithField(f);
    }
  }
  return Status::Ok();
}

Status ValidatePartition(const PartitionConfig& p, const Topology& topo) {
  if (Status s = ValidateNodeSetName(p.name, "name"); !s.ok()) return s;
  if (Status s = CheckNodes(p.nodes, topo); !s.ok()) return s;
  if (Status s = CheckTenants(p.tenants); !s.ok()) return s;
  if (p.default_time < 0) {
    return Status::Error("default_time: must be 0 (the scheduler's default) or more")
        .WithField("default_time");
  }
  if (p.max_time < 0) {
    return Status::Error("max_time: must be 0 (no bound) or more").WithField("max_time");
  }
  if (p.max_time > 0 && p.default_time > p.max_time) {
    return Status::Error("default_time: " + Hours(p.default_time) + " is longer than max_time " +
                         Hours(p.max_time) + ": lower it or raise max_time")
        .WithField("default_time");
  }
  if (p.max_gpus < 0) {
    return Status::Error("max_gpus: must be 0 (no bound) or more").WithField("max_gpus");
  }
  if (p.priority_tier < -kMaxPriorityTier || p.priority_tier > kMaxPriorityTier) {
    return Status::Error("priority_tier: must be within -1000..1000").WithField("priority_tier");
  }
  return Status::Ok();
}

Status ValidateReservation(const ReservationConfig& r, const Topology& topo) {
  if (Status s = ValidateNodeSetName(r.name, "name"); !s.ok()) return s;
  if (Status s = CheckNodes(r.nodes, topo); !s.ok()) return s;
  if (Status s = CheckTenants(r.tenants); !s.ok()) return s;
  if (r.start < 0) return Status::Error("start: must not be negative").WithField("start");
  if (r.end <= r.start) {
    return Status::Error("end: must be after start (a duration of at least 1 ms)").WithField("end");
  }
  return Status::Ok();
}

bool TenantAllowed(const std::vector<std::string>& allowed, const std::string& tenant) {
  if (allowed.empty()) return true;
  for (const std::string& a : allowed) {
    if (tenant == a) return true;
    if (tenant.size() > a.size() && tenant.compare(0, a.size(), a) == 0 && tenant[a.size()] == '/')
      return true;
  }
  return false;
}

NodeSets::NodeSets(const Topology& topology) : topo_(&topology) {}

NodeSets::Resolved NodeSets::Resolve(const std::vector<std::string>& nodes) const {
  Resolved r;
  r.in.assign(topo_->node_count(), 0);
  for (const std::string& name : nodes) {
    const NodeId n = topo_->FindNode(name);
    if (n >= 0) r.in[n] = 1;
  }
  return r;
}

Status NodeSets::ConfigurePartition(PartitionConfig p) {
  if (Status s = ValidatePartition(p, *topo_); !s.ok()) return s;
  if (p.is_default) {
    const PartitionConfig* d = default_partition();
    if (d != nullptr && d->name != p.name) {
      return Status::Error("default: partition '" + d->name +
                               "' is the default already: make it not the default first",
                           ErrorCode::kConflict)
          .WithField("default");
    }
  }
  if (!partitions_.count(p.name) && partitions_.size() >= kMaxNodeSets) {
    return Status::Error("at most " + std::to_string(kMaxNodeSets) + " partitions",
                         ErrorCode::kTooLarge);
  }
  partition_nodes_[p.name] = Resolve(p.nodes);
  const std::string name = p.name;
  partitions_[name] = std::move(p);
  ++version_;
  return Status::Ok();
}

Status NodeSets::ConfigureReservation(ReservationConfig r) {
  if (Status s = ValidateReservation(r, *topo_); !s.ok()) return s;
  if (!reservations_.count(r.name) && reservations_.size() >= kMaxNodeSets) {
    return Status::Error("at most " + std::to_string(kMaxNodeSets) + " reservations",
                         ErrorCode::kTooLarge);
  }
  Resolved mine = Resolve(r.nodes);
  for (const auto& [name, other] : reservations_) {
    if (name == r.name || !Overlap(r.start, r.end, other.start, other.end)) continue;
    const Resolved& theirs = reservation_nodes_.at(name);
    for (NodeId n = 0; n < topo_->node_count(); ++n) {
      if (mine.in[n] && theirs.in[n]) {
        return Status::Error("nodes: node '" + topo_->node(n).name + "' is in reservation '" +
                                 name + "' at the same time: choose other nodes or another window",
                             ErrorCode::kConflict)
            .WithField("nodes");
      }
    }
  }
  reservation_nodes_[r.name] = std::move(mine);
  const std::string name = r.name;
  reservations_[name] = std::move(r);
  ++version_;
  return Status::Ok();
}

Status NodeSets::DeletePartition(const std::string& name) {
  if (!partitions_.erase(name)) {
    return Status::Error("no partition '" + name + "'", ErrorCode::kNotFound);
  }
  partition_nodes_.erase(name);
  ++version_;
  return Status::Ok();
}

Status NodeSets::DeleteReservation(const std::string& name) {
  if (!reservations_.erase(name)) {
    return Status::Error("no reservation '" + name + "'", ErrorCode::kNotFound);
  }
  reservation_nodes_.erase(name);
  ++version_;
  return Status::Ok();
}

const PartitionConfig* NodeSets::partition(const std::string& name) const {
  auto it = partitions_.find(name);
  return it == partitions_.end() ? nullptr : &it->second;
}

const ReservationConfig* NodeSets::reservation(const std::string& name) const {
  auto it = reservations_.find(name);
  return it == reservations_.end() ? nullptr : &it->second;
}

const PartitionConfig* NodeSets::default_partition() const {
  for (const auto& [name, p] : partitions_) {
    if (p.is_default) return &p;
  }
  return nullptr;
}

const PartitionConfig* NodeSets::PartitionOf(const JobRequest& job) const {
  if (!job.partition.empty()) return partition(job.partition);
  return default_partition();
}

bool NodeSets::InReservation(const ReservationConfig& r, NodeId n) const {
  auto it = reservation_nodes_.find(r.name);
  return it != reservation_nodes_.end() && it->second.in[n];
}

bool NodeSets::InPartition(const PartitionConfig& p, NodeId n) const {
  auto it = partition_nodes_.find(p.name);
  return it != partition_nodes_.end() && it->second.in[n];
}

int NodeSets::PartitionGpus(const PartitionConfig& p) const {
  int gpus = 0;
  for (NodeId n = 0; n < topo_->node_count(); ++n) {
    if (InPartition(p, n)) gpus += topo_->node(n).gpus;
  }
  return gpus;
}

Status NodeSets::Admit(const JobRequest& job, TimeMs now) const {
  const PartitionConfig* p = nullptr;
  if (!job.partition.empty()) {
    if (Status s = ValidateNodeSetName(job.partition, "partition"); !s.ok()) return s;
    p = partition(job.partition);
    if (p == nullptr) {
      return Status::Error(
                 "partition: there is no partition '" + job.partition + "'; " +
                     (partitions_.empty() ? std::string("this cluster has none: leave it out")
                                          : "the partitions are " + Join(Names(partitions_))) +
                     " (topo partition list)",
                 ErrorCode::kNotFound)
          .WithField("partition");
    }
  } else if (!partitions_.empty()) {
    p = default_partition();
    if (p == nullptr) {
      return Status::Error("partition: this cluster has partitions (" + Join(Names(partitions_)) +
                           ") and no default one: name one (--partition NAME)")
          .WithField("partition");
    }
  }
  if (p != nullptr) {
    if (!TenantAllowed(p->tenants, job.tenant)) {
      return Status::Error("partition: tenant '" + job.tenant + "' may not run in partition '" +
                               p->name + "' (its tenants: " + Join(p->tenants) +
                               "): choose another partition",
                           ErrorCode::kForbidden)
          .WithField("partition");
    }
    if (p->max_gpus > 0 && job.spec.gpus > p->max_gpus) {
      return Status::Error("spec.gpus: " + std::to_string(job.spec.gpus) +
                           " GPUs is more than partition '" + p->name + "' allows a job (" +
                           std::to_string(p->max_gpus) + "): ask for fewer or another partition")
          .WithField("spec.gpus");
    }
    const int has = PartitionGpus(*p);
    if (job.spec.gpus > has) {
      return Status::Error("spec.gpus: partition '" + p->name + "' has " + std::to_string(has) +
                               " GPUs, fewer than the job's " + std::to_string(job.spec.gpus),
                           ErrorCode::kInfeasible)
          .WithField("spec.gpus");
    }
    if (p->max_time > 0 && job.time_limit > p->max_time) {
      return Status::Error("time_limit: " + Hours(job.time_limit) + " is longer than partition '" +
                           p->name + "' allows (max_time " + Hours(p->max_time) +
                           "): ask for less (topo submit --time, #SBATCH -t)")
          .WithField("time_limit");
    }
  }
  if (!job.reservation.empty()) {
    if (Status s = ValidateNodeSetName(job.reservation, "reservation"); !s.ok()) return s;
    const ReservationConfig* r = reservation(job.reservation);
    if (r == nullptr) {
      return Status::Error("reservation: there is no reservation '" + job.reservation +
                               "' (an ended one is gone; topo reservation list)",
                           ErrorCode::kNotFound)
          .WithField("reservation");
    }
    if (!TenantAllowed(r->tenants, job.tenant)) {
      return Status::Error("reservation: tenant '" + job.tenant + "' may not use reservation '" +
                               r->name + "' (its tenants: " + Join(r->tenants) + ")",
                           ErrorCode::kForbidden)
          .WithField("reservation");
    }
    if (r->end <= now) {
      return Status::Error("reservation: '" + r->name + "' has ended").WithField("reservation");
    }
    int gpus = 0;
    for (NodeId n = 0; n < topo_->node_count(); ++n) {
      if (InReservation(*r, n) && (p == nullptr || InPartition(*p, n))) gpus += topo_->node(n).gpus;
    }
    if (job.spec.gpus > gpus) {
      return Status::Error("reservation: '" + r->name + "' holds " + std::to_string(gpus) +
                               " GPUs" + (p ? " in partition '" + p->name + "'" : std::string()) +
                               ", fewer than the job's " + std::to_string(job.spec.gpus),
                           ErrorCode::kInfeasible)
          .WithField("reservation");
    }
  }
  return Status::Ok();
}

TimeMs NodeSets::BaseTimeLimit(const JobRequest& job, TimeMs fallback) const {
  if (job.time_limit > 0) return job.time_limit;
  const PartitionConfig* p = PartitionOf(job);
  if (p == nullptr) return fallback;
  if (p->default_time > 0) return p->default_time;
  return p->max_time > 0 ? std::min(fallback, p->max_time) : fallback;
}

NodeFence NodeSets::HomeFence(const JobRequest& job) const {
  if (empty()) return nullptr;
  return FenceFor(job, 0, 0, /*others=*/false);
}

NodeFence NodeSets::FenceFor(const JobRequest& job, TimeMs now, TimeMs limit) const {
  if (empty()) return nullptr;
  return FenceFor(job, now, limit, /*others=*/true);
}

NodeFence NodeSets::FenceFor(const JobRequest& job, TimeMs now, TimeMs limit, bool others) const {
  const PartitionConfig* p = PartitionOf(job);
  const ReservationConfig* own = job.reservation.empty() ? nullptr : reservation(job.reservation);
  // What decides the fence: the partition, the own reservation and which
  // other reservations the run [now, now + limit) meets.
  std::string key = (p ? p->name : std::string()) + "|" + (own ? own->name : std::string()) + "|";
  bool any_other = false;
  if (others) {
    for (const auto& [name, r] : reservations_) {
      const bool meets =
          own != &r && Overlap(now, now + std::max<TimeMs>(limit, 1), r.start, r.end);
      key += meets ? '1' : '0';
      any_other = any_other || meets;
    }
  }
  if (p == nullptr && own == nullptr && !any_other) return nullptr;
  if (memo_version_ != version_ || memo_.size() > kMaxFenceMemo) {
    memo_.clear();
    memo_version_ = version_;
  }
  auto [it, fresh] = memo_.try_emplace(key);
  if (!fresh) return it->second;
  auto fence = std::make_shared<std::vector<uint8_t>>(topo_->node_count(), 1);
  std::vector<uint8_t>& f = *fence;
  if (p) {
    const Resolved& in = partition_nodes_.at(p->name);
    for (size_t n = 0; n < f.size(); ++n) f[n] = f[n] && in.in[n];
  }
  if (own) {
    const Resolved& in = reservation_nodes_.at(own->name);
    for (size_t n = 0; n < f.size(); ++n) f[n] = f[n] && in.in[n];
  }
  if (others) {
    for (const auto& [name, r] : reservations_) {
      if (own == &r || !Overlap(now, now + std::max<TimeMs>(limit, 1), r.start, r.end)) continue;
      const Resolved& in = reservation_nodes_.at(name);
      for (size_t n = 0; n < f.size(); ++n) f[n] = f[n] && !in.in[n];
    }
  }
  it->second = std::move(fence);
  return it->second;
}

std::vector<std::string> NodeSets::Meeting(const JobRequest& job, TimeMs now, TimeMs limit) const {
  std::vector<std::string> out;
  for (const auto& [name, r] : reservations_) {
    if (name != job.reservation && Overlap(now, now + std::max<TimeMs>(limit, 1), r.start, r.end))
      out.push_back(name);
  }
  return out;
}

std::string NodeSets::WindowBlock(const JobRequest& job, TimeMs now) const {
  if (job.reservation.empty()) return "";
  const ReservationConfig* r = reservation(job.reservation);
  if (r == nullptr || now >= r->start) return "";
  return "waiting for reservation '" + r->name + "', which starts in " + Hours(r->start - now);
}

std::vector<std::string> NodeSets::PartitionsOf(NodeId n) const {
  std::vector<std::string> out;
  for (const auto& [name, in] : partition_nodes_) {
    if (in.in[n]) out.push_back(name);
  }
  return out;
}

const ReservationConfig* NodeSets::ReservationOn(NodeId n, TimeMs now) const {
  const ReservationConfig* best = nullptr;
  for (const auto& [name, r] : reservations_) {
    if (r.end <= now || !reservation_nodes_.at(name).in[n]) continue;
    if (best == nullptr || r.start < best->start) best = &r;
  }
  return best;
}

std::vector<std::string> NodeSets::RemoveEnded(TimeMs now) {
  std::vector<std::string> gone;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.end <= now) {
      gone.push_back(it->first);
      reservation_nodes_.erase(it->first);
      it = reservations_.erase(it);
    } else {
      ++it;
    }
  }
  if (!gone.empty()) ++version_;
  return gone;
}

TimeMs NodeSets::NextChange(TimeMs now, TimeMs lead) const {
  TimeMs next = kNever;
  auto consider = [&](TimeMs t) {
    if (t > now) next = std::min(next, t);
  };
  for (const auto& [name, r] : reservations_) {
    consider(r.start);
    consider(r.end);
    if (r.maintenance) consider(r.start - lead);
  }
  return next;
}

}  // namespace topo::core
