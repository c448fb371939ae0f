#pragma once
// Partitions and reservations: the named node sets a site runs its cluster
// by, as Slurm's partitions and reservations are, and the one owner of their
// rules (NodeSets). One part of SchedulerCore's brain.
//
//   NodeSets sets(topology);
//   sets.ConfigurePartition({.name = "gpu", .nodes = {...}, .max_time = 48 * kHour,
//                            .is_default = true});
//   sets.ConfigureReservation({.name = "maint", .nodes = {...}, .start = t, .end = t + 4 * kHour,
//                              .maintenance = true});
//   Status ok = sets.Admit(request);            // at submission: partition, reservation, limits
//   NodeFence f = sets.FenceFor(request, now, limit);  // nodes the job may take work on
//
// A partition is a set of nodes (a node may be in several) with its own
// default and maximum time limit, maximum GPUs per job, allowed tenants, a
// priority tier (a job of a higher tier is considered first and may preempt
// jobs of lower tiers' preemptible partitions) and whether its jobs may be
// preempted at all. A job names one (JobRequest::partition) or gets the
// default one; with no partitions configured every job may use every node.
//
// A reservation holds nodes for a window [start, end): only jobs naming it
// (JobRequest::reservation), of its tenants, take work on its nodes while it
// is active, and a job that does not name it may use them before it only if
// its time limit ends by the start (backfill never runs a job into it). A
// job naming it starts only inside the window, on its nodes, and ends with
// it. A maintenance reservation drains its nodes in time: running jobs that
// would overrun its start are asked to checkpoint a lead before it and are
// requeued at it (an infrastructure stop: they restart elsewhere from that
// checkpoint).
//
// Thread safety: none; one owner (SchedulerCore).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "topo/core/status.hpp"
#include "topo/core/time.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

struct SnapshotAccess;
struct JobRequest;

// A name of a partition or reservation: 1..64 of [A-Za-z0-9._-], not
// starting with '-' or '.'.
inline constexpr size_t kMaxNodeSetNameBytes = 64;
inline constexpr size_t kMaxNodeSets = 1000;        // partitions, and reservations, each
inline constexpr size_t kMaxNodeSetTenants = 1000;  // tenants one set lists
Status ValidateNodeSetName(const std::string& name, const char* field);

struct PartitionConfig {
  std::string name;
  std::vector<std::string> nodes;  // node names of the topology; at least one
  TimeMs default_time = 0;         // a job's limit when it names none; 0: the config's
  TimeMs max_time = 0;             // the most a job may ask for; 0: no bound
  int max_gpus = 0;                // per job; 0: no bound
  // Tenants whose jobs may run here: each one and every tenant below it
  // ("org" admits "org/team/user"); empty: every tenant.
  std::vector<std::string> tenants;
  int priority_tier = 0;     // higher first; -1000..1000
  bool preemptible = false;  // jobs here may be preempted (by priority or a higher tier)
  bool is_default = false;   // jobs that name no partition run here (one at most)
  bool operator==(const PartitionConfig&) const = default;
};

struct ReservationConfig {
  std::string name;
  std::vector<std::string> nodes;  // node names; at least one
  TimeMs start = 0;
  TimeMs end = 0;  // > start
  // Tenants whose jobs may use it (each and every tenant below it); empty:
  // any job that names it.
  std::vector<std::string> tenants;
  bool maintenance = false;
  bool operator==(const ReservationConfig&) const = default;
};

// A node set's fields against the topology (names, sizes, times, node names
// that exist). Errors name the field ("nodes", "max_time") and the fix.
Status ValidatePartition(const PartitionConfig& p, const Topology& topo);
Status ValidateReservation(const ReservationConfig& r, const Topology& topo);

// Nodes a job may take work on, by node id (1: may); null: every node.
using NodeFence = std::shared_ptr<const std::vector<uint8_t>>;

// Whether `tenant` is one of `allowed` or below one of them; true for an
// empty list. The one rule for both kinds of set.
bool TenantAllowed(const std::vector<std::string>& allowed, const std::string& tenant);

class NodeSets {
 public:
  // REQUIRES: topology outlives this table.
  explicit NodeSets(const Topology& topology);

  // Adds or replaces one (a second default partition is refused: kConflict,
  // naming the first; a reservation overlapping another on a node in time
  // is refused naming both). Validates first; nothing changes on an error.
  Status ConfigurePartition(PartitionConfig p);
  Status ConfigureReservation(ReservationConfig r);
  // kNotFound when there is none.
  Status DeletePartition(const std::string& name);
  Status DeleteReservation(const std::string& name);

  const std::map<std::string, PartitionConfig>& partitions() const { return partitions_; }
  const std::map<std::string, ReservationConfig>& reservations() const { return reservations_; }
  const PartitionConfig* partition(const std::string& name) const;
  const ReservationConfig* reservation(const std::string& name) const;
  const PartitionConfig* default_partition() const;
  bool empty() const { return partitions_.empty() && reservations_.empty(); }
  // Bumped by every change (configure, delete, a reservation ending).
  uint64_t version() const { return version_; }

  // The partition a job runs in: the one it names, else the default; nullptr
  // when it names none and there is no default (every node).
  const PartitionConfig* PartitionOf(const JobRequest& job) const;
  // Whether a submission may be queued: its partition exists (or a default
  // does, or no partition exists), its tenant is allowed there, its GPUs and
  // time limit are within the partition's bounds, its reservation exists,
  // admits its tenant, has not ended and lies within its partition. Errors
  // are kInvalid (an unknown name: kNotFound) and name the field
  // ("partition", "reservation", "time_limit", "spec.gpus") and the fix.
  Status Admit(const JobRequest& job, TimeMs now) const;
  // The job's time limit before any reservation clips it: its own, else its
  // partition's default, else `fallback`.
  TimeMs BaseTimeLimit(const JobRequest& job, TimeMs fallback) const;

  // Nodes a job may take work on at `now` with a run of `limit` from then:
  // its partition's (or its reservation's), without the nodes of any
  // reservation it does not use that is active at some time of
  // [now, now + limit). null when that is every node. Equal fences are the
  // same pointer while version() and the reservations' phases stay.
  NodeFence FenceFor(const JobRequest& job, TimeMs now, TimeMs limit) const;
  // The reservations FenceFor keeps the job off, by name.
  std::vector<std::string> Meeting(const JobRequest& job, TimeMs now, TimeMs limit) const;
  // The nodes of its partition and its own reservation alone, whatever the
  // time: where the job could ever run (feasibility is judged on these).
  NodeFence HomeFence(const JobRequest& job) const;
  // Why a job naming a reservation may not start at `now` ("" when it may):
  // the window has not begun.
  std::string WindowBlock(const JobRequest& job, TimeMs now) const;
  // The partitions holding node n, by name.
  std::vector<std::string> PartitionsOf(NodeId n) const;
  // The reservation on node n active at `now` or the next one to start,
  // nullptr when none.
  const ReservationConfig* ReservationOn(NodeId n, TimeMs now) const;
  // Whether node n is in reservation r.
  bool InReservation(const ReservationConfig& r, NodeId n) const;
  bool InPartition(const PartitionConfig& p, NodeId n) const;
  int PartitionGpus(const PartitionConfig& p) const;

  // Reservations whose end is at or before `now`: removed, their names
  // returned (by name).
  std::vector<std::string> RemoveEnded(TimeMs now);
  // The next time after `now` at which a reservation starts or ends, or a
  // maintenance one's checkpoint lead begins (start - lead); kNever when none.
  TimeMs NextChange(TimeMs now, TimeMs lead) const;

 private:
  friend struct SnapshotAccess;
  struct Resolved {
    std::vector<uint8_t> in;  // by node
  };
  Resolved Resolve(const std::vector<std::string>& nodes) const;
  NodeFence FenceFor(const JobRequest& job, TimeMs now, TimeMs limit, bool others) const;
  const Topology* topo_;
  std::map<std::string, PartitionConfig> partitions_;
  std::map<std::string, ReservationConfig> reservations_;
  std::map<std::string, Resolved> partition_nodes_;
  std::map<std::string, Resolved> reservation_nodes_;
  uint64_t version_ = 0;
  // FenceFor's memo: fences by what decides them, for this version.
  mutable uint64_t memo_version_ = ~uint64_t{0};
  mutable std::map<std::string, NodeFence> memo_;
};

}  // namespace topo::core
