// /v1/cluster and /v1/utilization: cluster-wide counts, and per domain for
// the dashboard's aggregated view of large clusters.

#include <algorithm>
#include <array>
#include <bit>
#include <unordered_map>

#include "daemon/api/handlers.hpp"

namespace topo::daemon {
namespace {

using core::DomainId;
using core::JobId;
using core::NodeId;

// Jobs listed per domain by ?by=domain (the largest by GPUs there).
constexpr size_t kJobsPerDomain = 8;

// One node's share of GpuCounts: a failed GPU still held by a job counts as
// allocated (the job holds it until it moves), a free GPU of a node that is
// not up as unavailable.
GpuCounts NodeCounts(const core::ClusterState& cluster, NodeId n) {
  GpuCounts c;
  const int gpus = cluster.node_gpus(n);
  const int busy = std::popcount(cluster.busy_mask(n));
  const int failed = std::popcount(cluster.failed_mask(n) & ~cluster.busy_mask(n));
  c.total = gpus;
  c.allocated = busy;
  c.failed = failed;
  if (cluster.NodeAcceptsWork(n)) {
    c.free = gpus - busy - failed;
  } else {
    c.unavailable = gpus - busy - failed;
  }
  return c;
}

void Add(GpuCounts& into, const GpuCounts& c) {
  into.total += c.total;
  into.allocated += c.allocated;
  into.failed += c.failed;
  into.free += c.free;
  into.unavailable += c.unavailable;
}

Json CountsJson(const GpuCounts& g) {
  return Json{{"total", g.total},
              {"allocated", g.allocated},
              {"free", g.free},
              {"failed", g.failed},
              {"unavailable", g.unavailable}};
}

constexpr std::array kNodeStates = {core::NodeState::kUp, core::NodeState::kDraining,
                                    core::NodeState::kDrained, core::NodeState::kDown,
                                    core::NodeState::kSuspect};

// Every domain from the HBD tier (at least the tier above the nodes) up to the
// tier below the root, top tier first, each as
//   {"name", "tier", "parent" (null under the root), "nodes", "gpus": COUNTS,
//    "node_states": {"up": N, ...}, "jobs": [{"id", "gpus"}...],
//    "job_count", "other_tenants_gpus"}.
// GPU and node counts are cluster facts every caller may see; a job id only
// for jobs in the caller's scope, the rest summed in other_tenants_gpus.
Json DomainsJson(const ServiceState& s, const Caller& caller) {
  const core::Topology& topo = *s.driver.topology();
  const core::ClusterState& cluster = s.driver.core()->cluster();
  const int lo = std::max(topo.hbd_tier(), 1);
  const int hi = topo.tier_count() - 1;
  Json out = Json::array();
  if (lo > hi) return out;
  const DomainId first = topo.tier_first(lo);
  const DomainId last = topo.tier_first(hi) + topo.tier_size(hi);  // tiers are contiguous
  const size_t count = static_cast<size_t>(last - first);
  std::vector<GpuCounts> gpus(count);
  std::vector<std::array<int, kNodeStates.size()>> states(count, std::array<int, 5>{});
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    const GpuCounts c = NodeCounts(cluster, n);
    const auto state = static_cast<size_t>(cluster.node_state(n));
    for (int t = lo; t <= hi; ++t) {
      const size_t d = static_cast<size_t>(topo.Ancestor(n, t) - first);
      Add(gpus[d], c);
      ++states[d][state];
    }
  }
  std::vector<std::vector<std::pair<int, JobId>>> jobs(count);  // (GPUs, job) per domain
  std::vector<int> other(count, 0);
  std::unordered_map<DomainId, int> on;
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (j.ranks.empty()) continue;
    const bool visible = caller.InScope(j.request.tenant);
    on.clear();
    for (const core::GpuSlot& slot : j.ranks) {
      for (int t = lo; t <= hi; ++t) ++on[topo.Ancestor(slot.node, t)];
    }
    for (const auto& [d, g] : on) {
      const size_t i = static_cast<size_t>(d - first);
      if (visible) {
        jobs[i].emplace_back(g, id);
      } else {
        other[i] += g;
      }
    }
  }
  for (int t = hi; t >= lo; --t) {
    for (DomainId d = topo.tier_first(t); d < topo.tier_first(t) + topo.tier_size(t); ++d) {
      const size_t i = static_cast<size_t>(d - first);
      const core::Domain& dom = topo.domain(d);
      Json node_states = Json::object();
      for (size_t k = 0; k < kNodeStates.size(); ++k) {
        if (states[i][k] > 0)
          node_states[std::string(NodeStateName(kNodeStates[k]))] = states[i][k];
      }
      std::vector<std::pair<int, JobId>>& list = jobs[i];
      const size_t shown = std::min(list.size(), kJobsPerDomain);
      std::partial_sort(list.begin(), list.begin() + static_cast<ptrdiff_t>(shown), list.end(),
                        [](const auto& a, const auto& b) {
                          return a.first != b.first ? a.first > b.first : a.second < b.second;
                        });
      Json top = Json::array();
      for (size_t k = 0; k < shown; ++k)
        top.push_back({{"id", list[k].second}, {"gpus", list[k].first}});
      const bool under_root = dom.parent == topo.root() || dom.parent == core::kNoDomain;
      out.push_back({{"name", dom.name},
                     {"tier", topo.tier(t).name},
                     {"parent", under_root ? Json(nullptr) : Json(topo.domain(dom.parent).name)},
                     {"nodes", dom.node_end - dom.node_begin},
                     {"gpus", CountsJson(gpus[i])},
                     {"node_states", std::move(node_states)},
                     {"jobs", std::move(top)},
                     {"job_count", list.size()},
                     {"other_tenants_gpus", other[i]}});
    }
  }
  return out;
}

}  // namespace

GpuCounts CountGpus(const ServiceState& s) {
  GpuCounts c;
  const core::ClusterState& cluster = s.driver.core()->cluster();
  for (NodeId n = 0; n < s.driver.topology()->node_count(); ++n) Add(c, NodeCounts(cluster, n));
  return c;
}

Answer GetUtilization(const ServiceState& s, const Caller&, const Route&) {
  Json samples = Json::array();
  for (const UtilizationSample& u : s.driver.utilization()) {
    samples.push_back({{"time_ms", u.time_ms}, {"allocated", u.allocated}, {"total", u.total}});
  }
  return JsonAnswer(200, Json{{"samples", std::move(samples)}});
}

Answer GetCluster(const ServiceState& s, const Caller& caller, const Route& route) {
  if (core::Status e = UnknownParameter(route, {"by"}); !e.ok()) return e;
  bool by_domain = false;
  if (auto it = route.query.find("by"); it != route.query.end()) {
    if (it->second != "domain") {
      return Invalid("by=" + it->second.substr(0, 40) +
                         " is not a grouping; use by=domain (per-domain counts) or leave it out",
                     "by");
    }
    by_domain = true;
  }
  if (s.driver.core() == nullptr) {
    Json out{{"topology", nullptr},
             {"gpus", nullptr},
             {"jobs", nullptr},
             {"last_seq", s.driver.store().LastSeq()}};
    if (by_domain) out["domains"] = Json::array();
    return JsonAnswer(200, out);
  }
  const core::Topology& topo = *s.driver.topology();
  Json tiers = Json::array();
  for (int t = 0; t < topo.tier_count(); ++t) tiers.push_back(topo.tier(t).name);
  GpuCounts g = CountGpus(s);
  int queued = 0, running = 0, held = 0;
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (!caller.InScope(j.request.tenant)) continue;
    queued += j.state == core::JobState::kQueued;
    held += j.state == core::JobState::kHeld;
    running += j.state == core::JobState::kRunning || j.state == core::JobState::kPreempting;
  }
  Json out{{"topology",
            {{"name", topo.name()},
             {"tiers", tiers},
             {"hbd_tier", topo.tier(topo.hbd_tier()).name},
             {"leaf_tier", topo.tier(topo.leaf_tier()).name},
             {"nodes", topo.node_count()}}},
           {"gpus", CountsJson(g)},
           {"jobs", {{"queued", queued}, {"running", running}, {"held", held}}},
           {"last_seq", s.driver.store().LastSeq()}};
  if (by_domain) out["domains"] = DomainsJson(s, caller);
  return JsonAnswer(200, out);
}

}  // namespace topo::daemon
