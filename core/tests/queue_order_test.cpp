// Queue order policies against hand-sorted queues.

#include <doctest/doctest.h>

#include "topo/core/queue_order.hpp"

using namespace topo::core;

namespace {

std::vector<JobId> Ids(const std::vector<QueuedJob>& q) {
  std::vector<JobId> out;
  for (const QueuedJob& j : q) out.push_back(j.id);
  return out;
}

// Tenant a has used far more than b.
QuotaLedger AHeavierThanB() {
  QuotaLedger q(1'000'000 * kHour);
  q.AddJob("a", 100);
  q.Advance(kHour);
  return q;
}

}  // namespace

TEST_CASE("queue order: the factory knows both policies by name") {
  for (const std::string& n : QueueOrderNames()) {
    auto o = MakeQueueOrder(n);
    REQUIRE(o != nullptr);
    CHECK(o->name() == n);
  }
  CHECK(MakeQueueOrder("lifo") == nullptr);
}

TEST_CASE("queue order: multifactor and fifo on the same queue") {
  const std::string a = "a", b = "b";
  const QuotaLedger q = AHeavierThanB();
  //                  id preempt prio  head  tenant queued
  std::vector<QueuedJob> jobs = {
      {1, false, 0, false, &a, 10},  //
      {2, false, 0, false, &b, 20},  //
      {3, false, 5, false, &a, 30},  // higher priority
      {4, false, 0, true, &a, 40},   // requeued at the head
      {5, true, 0, false, &b, 50},   // waits for its victims
      {6, false, 0, false, &b, 20},  // same age as 2: id decides
  };
  std::vector<QueuedJob> multi = jobs, fifo = jobs;
  MakeQueueOrder("multifactor")->Sort(multi, q);
  MakeQueueOrder("fifo")->Sort(fifo, q);
  // Multifactor: preemptor, priority, head, fairshare (b below a), age, id.
  CHECK(Ids(multi) == std::vector<JobId>{5, 3, 4, 2, 6, 1});
  // FIFO: preemptor, head, age, id; priority and fairshare ignored.
  CHECK(Ids(fifo) == std::vector<JobId>{5, 4, 1, 2, 6, 3});
}

TEST_CASE("queue order: an overdue job passes fairshare, not priority or the head") {
  const std::string a = "a", b = "b";
  const QuotaLedger q = AHeavierThanB();
  //                  id preempt prio  head  tenant queued overdue
  std::vector<QueuedJob> jobs = {
      {1, false, 0, false, &a, 30, true},   // a, overdue
      {2, false, 0, false, &b, 20, false},  // b, below its share
      {3, false, 0, false, &a, 10, true},   // a, overdue longer
      {4, false, 5, false, &b, 40, false},  // higher priority
      {5, false, 0, true, &a, 50, false},   // requeued at the head
      {6, false, 0, false, &a, 5, false},   // a, oldest but not overdue
  };
  std::vector<QueuedJob> multi = jobs, fifo = jobs;
  MakeQueueOrder("multifactor")->Sort(multi, q);
  MakeQueueOrder("fifo")->Sort(fifo, q);
  // Priority, head, the overdue by age, then fairshare (b first), then age.
  CHECK(Ids(multi) == std::vector<JobId>{4, 5, 3, 1, 2, 6});
  // FIFO ignores it: head, then age.
  CHECK(Ids(fifo) == std::vector<JobId>{5, 6, 3, 2, 1, 4});
  // Before tells an overdue job from one that is not without the usage.
  auto order = MakeQueueOrder("multifactor");
  CHECK(order->Before(jobs[0], jobs[1]) == std::optional<bool>(true));
  CHECK(order->Before(jobs[1], jobs[0]) == std::optional<bool>(false));
  CHECK(order->Before(jobs[0], jobs[2]) == std::optional<bool>(false));
  CHECK_FALSE(order->Before(jobs[1], jobs[5]).has_value());
}

TEST_CASE("queue order: Before answers only what it can tell without usage") {
  const std::string a = "a", b = "b";
  auto multi = MakeQueueOrder("multifactor");
  auto fifo = MakeQueueOrder("fifo");
  QueuedJob x{1, false, 0, false, &a, 10};
  QueuedJob y{2, false, 0, false, &b, 20};
  CHECK_FALSE(multi->Before(x, y).has_value());  // fairshare would decide
  CHECK(fifo->Before(x, y) == std::optional<bool>(true));
  y.tenant = &a;
  CHECK(multi->Before(x, y) == std::optional<bool>(true));
  CHECK(multi->Before(y, x) == std::optional<bool>(false));
  y.priority = 1;
  CHECK(multi->Before(x, y) == std::optional<bool>(false));
  CHECK(fifo->Before(x, y) == std::optional<bool>(true));
}
