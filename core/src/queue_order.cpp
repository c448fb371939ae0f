// Queue order policies (queue_order.hpp).

#include "topo/core/queue_order.hpp"

#include <algorithm>

namespace topo::core {

namespace {

bool ByAge(const QueuedJob& a, const QueuedJob& b) {
  return a.queued != b.queued ? a.queued < b.queued : a.id < b.id;
}

class FifoOrder final : public QueueOrder {
 public:
  std::string_view name() const override { return "fifo"; }

  void Sort(std::vector<QueuedJob>& jobs, const QuotaLedger&) const override {
    std::sort(jobs.begin(), jobs.end(),
              [this](const QueuedJob& a, const QueuedJob& b) { return *Before(a, b); });
  }

  std::optional<bool> Before(const QueuedJob& a, const QueuedJob& b) const override {
    if (a.preemptor != b.preemptor) return a.preemptor;
    if (a.tier != b.tier) return a.tier > b.tier;
    if (a.requeued_at_head != b.requeued_at_head) return a.requeued_at_head;
    return ByAge(a, b);
  }
};

class MultifactorOrder final : public QueueOrder {
 public:
  std::string_view name() const override { return "multifactor"; }

  void Sort(std::vector<QueuedJob>& jobs, const QuotaLedger& quotas) const override {
    // Every key is looked up once per job, then the sort compares plain
    // values (the queue can hold many thousands of jobs; this runs every pass).
    QuotaLedger::FairshareView fairshare = quotas.Fairshare();
    struct Keyed {
      QueuedJob job;
      const std::vector<double>* fairshare;
    };
    std::vector<Keyed> keyed;
    keyed.reserve(jobs.size());
    for (const QueuedJob& j : jobs) keyed.push_back({j, &fairshare.KeyOf(*j.tenant)});
    std::sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) {
      if (std::optional<bool> before = Ranked(a.job, b.job)) return *before;
      if (a.fairshare != b.fairshare && *a.fairshare != *b.fairshare) {
        return *a.fairshare < *b.fairshare;
      }
      return ByAge(a.job, b.job);
    });
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i] = keyed[i].job;
  }

  std::optional<bool> Before(const QueuedJob& a, const QueuedJob& b) const override {
    if (std::optional<bool> before = Ranked(a, b)) return before;
    if (*a.tenant != *b.tenant) return std::nullopt;  // fairshare decides
    return ByAge(a, b);
  }

 private:
  // Preemptor, tier, priority, head, overdue: nullopt when fairshare decides.
  static std::optional<bool> Ranked(const QueuedJob& a, const QueuedJob& b) {
    if (a.preemptor != b.preemptor) return a.preemptor;
    if (a.tier != b.tier) return a.tier > b.tier;
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.requeued_at_head != b.requeued_at_head) return a.requeued_at_head;
    if (a.overdue != b.overdue) return a.overdue;
    if (a.overdue) return ByAge(a, b);  // fairshare no longer decides
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<QueueOrder> MakeQueueOrder(std::string_view name) {
  if (name == "multifactor") return std::make_unique<MultifactorOrder>();
  if (name == "fifo") return std::make_unique<FifoOrder>();
  return nullptr;
}

std::vector<std::string> QueueOrderNames() { return {"multifactor", "fifo"}; }

}  // namespace topo::core
