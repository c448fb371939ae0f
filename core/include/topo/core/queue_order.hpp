#pragma once
// Queue order: in which order the scheduling pass considers waiting jobs.
// A policy behind one interface, chosen by name in MakeQueueOrder (the
// algorithms never switch on a name).
//
//   "multifactor"  a job that preempted others first (it claims what they
//                  free), then its partition's higher priority tier, then
//                  higher priority, then jobs requeued at the
//                  head (a failed job keeps its place), then overdue jobs
//                  (eligible for longer than the config's
//                  fairshare_max_wait) by age, then fairshare (the tenant
//                  further below its share first, QuotaLedger), then age
//                  (queued time), then id.
//   "fifo"         preemptors, then the higher partition tier, then jobs
//                  requeued at the head, then age, then id: priority,
//                  fairshare and overdue are ignored.
//
// Both are total orders (ids are unique), so the result does not depend on
// the sort algorithm.
//
// Thread safety: the policies hold no state; Sort and Before are const.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/quota.hpp"
#include "topo/core/time.hpp"

namespace topo::core {

// What the order looks at of one waiting job.
struct QueuedJob {
  JobId id = 0;
  bool preemptor = false;  // it preempted others and waits for them to stop
  int priority = 0;
  bool requeued_at_head = false;
  const std::string* tenant = nullptr;  // REQUIRES: non-null, outlives the call
  TimeMs queued = 0;                    // ordering time (submission, or requeue)
  bool overdue = false;                 // eligible for longer than fairshare's bound (multifactor)
  int tier = 0;                         // its partition's priority tier (higher first)
};

class QueueOrder {
 public:
  virtual ~QueueOrder() = default;
  virtual std::string_view name() const = 0;
  // Sorts jobs into the order the pass considers them.
  virtual void Sort(std::vector<QueuedJob>& jobs, const QuotaLedger& quotas) const = 0;
  // Whether a comes before b, when that can be told without the tenants'
  // usage; nullopt when fairshare would decide (the caller then sorts).
  virtual std::optional<bool> Before(const QueuedJob& a, const QueuedJob& b) const = 0;
};

// nullptr for an unknown name.
std::unique_ptr<QueueOrder> MakeQueueOrder(std::string_view name);
std::vector<std::string> QueueOrderNames();

}  // namespace topo::core
