#include "workload.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>

#include "topo/core/evaluator.hpp"
#include "topo/core/fill.hpp"
#include "topo/core/rng.hpp"

namespace topo::bench {

namespace {

constexpr int kTp = 8;
constexpr int kEp = 8;
constexpr int kDensePpMax = 16;
constexpr int kDensePpGpusPerStage = 64;  // pp = min(16, gpus / 64) ...
constexpr int kDensePpFromGpus = 128;     // ... for jobs of at least 128 GPUs
constexpr int kMoePp = 4;
constexpr int kMoePpFromGpus = 2048;

Layout Impossible(std::string name, int gpus, std::string why) {
  Layout l;
  l.name = std::move(name);
  l.possible = false;
  l.why_not = std::move(why);
  l.job.gpus = gpus;
  return l;
}

// Fills job.parallelism with tp x ep x pp and dp the rest, or says why not.
Layout MakeLayout(std::string name, int gpus, int tp, int ep, int pp) {
  if (gpus % (tp * pp) != 0) {
    return Impossible(std::move(name), gpus,
                      "tp " + std::to_string(tp) + " x pp " + std::to_string(pp) +
                          " does not divide " + std::to_string(gpus) + " GPUs");
  }
  const int dp = gpus / (tp * pp);
  if (dp % ep != 0) {
    return Impossible(std::move(name), gpus,
                      "ep " + std::to_string(ep) + " needs dp divisible by " + std::to_string(ep) +
                          "; dp is " + std::to_string(dp));
  }
  Layout l;
  l.name = std::move(name);
  l.job.name = "p-" + l.name + "-" + std::to_string(gpus);
  l.job.gpus = gpus;
  l.job.parallelism.tp = tp;
  l.job.parallelism.ep = ep;
  l.job.parallelism.pp = pp;
  l.job.parallelism.dp = dp;
  core::Status valid = core::ValidateJobSpec(l.job);
  if (!valid.ok()) return Impossible(l.name, gpus, valid.message());
  return l;
}

}  // namespace

std::vector<Layout> LayoutsFor(int gpus, const core::Topology& topology) {
  std::vector<Layout> out;
  const int dense_pp =
      gpus >= kDensePpFromGpus ? std::min(kDensePpMax, gpus / kDensePpGpusPerStage) : 1;
  out.push_back(MakeLayout("dense", gpus, kTp, 1, dense_pp));
  const int moe_pp = gpus >= kMoePpFromGpus ? kMoePp : 1;
  Layout moe = MakeLayout("moe", gpus, kTp, kEp, moe_pp);
  out.push_back(moe);
  // The EP block is tp x cp x ep ranks; where no HBD can hold it, the
  // required constraint makes the job infeasible, so also try it preferred.
  if (topology.max_domain_gpus(topology.hbd_tier()) < kTp * kEp) {
    Layout relaxed = moe;
    relaxed.name = "moe-ep-pref";
    if (relaxed.possible) {
      relaxed.job.name = "p-moe-ep-pref-" + std::to_string(gpus);
      relaxed.job.constraints[static_cast<int>(core::GroupKind::kEp)].strength =
          core::Strength::kPreferred;
    }
    out.push_back(relaxed);
  }
  return out;
}

std::string DescribeParallelism(const core::Parallelism& p) {
  std::string out = "tp" + std::to_string(p.tp);
  if (p.cp > 1) out += " cp" + std::to_string(p.cp);
  if (p.ep > 1) out += " ep" + std::to_string(p.ep);
  if (p.pp > 1) out += " pp" + std::to_string(p.pp);
  if (p.dp > 1) out += " dp" + std::to_string(p.dp);
  return out;
}

uint64_t FillSeed(uint64_t seed, const std::string& topology, int fill_pct, int index) {
  uint64_t name_hash = 1469598103934665603ULL;  // FNV-1a
  for (char c : topology) {
    name_hash ^= static_cast<unsigned char>(c);
    name_hash *= 1099511628211ULL;
  }
  uint64_t x = core::Rng(seed).Next() ^ name_hash;
  x = core::Rng(x).Next() ^ static_cast<uint64_t>(fill_pct);
  x = core::Rng(x).Next() ^ static_cast<uint64_t>(index);
  return core::Rng(x).Next();
}

FillStates MakeFillStates(const core::Topology& topology, int fill_pct, int count, uint64_t seed) {
  FillStates out;
  out.fill_pct = fill_pct;
  const int n = fill_pct == 0 ? 1 : std::max(1, count);
  for (int i = 0; i < n; ++i) {
    core::ClusterState state(topology);
    const uint64_t s = FillSeed(seed, topology.name(), fill_pct, i);
    if (fill_pct > 0) core::FillCluster(state, fill_pct / 100.0, s);
    out.busy_share.push_back(static_cast<double>(state.total_busy_gpus()) / topology.total_gpus());
    out.seeds.push_back(s);
    out.states.push_back(std::move(state));
  }
  return out;
}

namespace {

// Fewest leaves of `state` that could hold the job now (see FilledLeafBound);
// 0 when it does not fit.
int FilledLeaves(const core::JobSpec& job, const core::ClusterState& state) {
  const core::Topology& topo = state.topology();
  const core::Parallelism& p = job.parallelism;
  const int hbd = topo.hbd_tier();
  const int leaf = topo.leaf_tier();
  auto required_in_hbd = [&](core::GroupKind k) {
    const core::TierConstraint& c = job.constraint(k);
    if (c.strength != core::Strength::kRequired) return false;
    core::Result<int> t = topo.FindTier(c.tier);
    return t.ok() && t.value() <= hbd;
  };
  int block = 1;
  if (p.ep > 1 && required_in_hbd(core::GroupKind::kEp)) {
    block = p.tp * p.cp * p.ep;
  } else if (p.tp > 1 && required_in_hbd(core::GroupKind::kTp)) {
    block = p.tp;
  }
  const bool whole_nodes = job.gpus_per_node == 0 && job.gpus >= topo.max_node_gpus();
  std::vector<int64_t> hbd_free(topo.tier_size(hbd), 0);
  for (core::NodeId n = 0; n < topo.node_count(); ++n) {
    const uint64_t free = state.usable_free_mask(n);
    int gpus = std::popcount(free);
    if (whole_nodes && free != state.all_mask(n)) gpus = 0;
    hbd_free[topo.Ancestor(n, hbd) - topo.tier_first(hbd)] += gpus;
  }
  std::vector<int64_t> leaf_cap(topo.tier_size(leaf), 0);
  for (int h = 0; h < topo.tier_size(hbd); ++h) {
    const core::Domain& d = topo.domain(topo.tier_first(hbd) + h);
    const int64_t usable = hbd_free[h] / block * block;
    leaf_cap[topo.Ancestor(d.node_begin, leaf) - topo.tier_first(leaf)] += usable;
  }
  std::sort(leaf_cap.begin(), leaf_cap.end(), std::greater<>());
  int64_t sum = 0;
  for (size_t i = 0; i < leaf_cap.size(); ++i) {
    sum += leaf_cap[i];
    if (sum >= job.gpus) return static_cast<int>(i + 1);
  }
  return 0;
}

}  // namespace

std::optional<double> FilledLeafBound(const core::JobSpec& job, const core::ClusterState& state) {
  const core::Topology& topo = state.topology();
  if (topo.leaf_tier() >= topo.root_tier()) return std::nullopt;
  const int min_leaves = core::MinDomainsForJob(job, topo, topo.leaf_tier());
  const int leaves = FilledLeaves(job, state);
  if (min_leaves <= 0 || leaves <= 0) return std::nullopt;
  return static_cast<double>(leaves) / min_leaves;
}

LatencyStats Summarize(std::vector<double> samples_us) {
  LatencyStats s;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  const size_t n = samples_us.size();
  auto rank = [&](double q) {
    size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    return samples_us[std::clamp<size_t>(r, 1, n) - 1];
  };
  s.p50_us = rank(0.50);
  s.p99_us = rank(0.99);
  s.max_us = samples_us.back();
  double sum = 0;
  for (double v : samples_us) sum += v;
  s.mean_us = sum / static_cast<double>(n);
  return s;
}

namespace {

struct Mean {
  double sum = 0;
  int n = 0;
  void Add(const std::optional<double>& v) {
    if (!v) return;
    sum += *v;
    ++n;
  }
  std::optional<double> Get() const {
    if (n == 0) return std::nullopt;
    return sum / n;
  }
};

}  // namespace

CellResult RunCell(const core::Placer& placer, const core::JobSpec& job, const FillStates& fill,
                   int reps) {
  CellResult r;
  r.gpus = job.gpus;
  r.policy = std::string(placer.name());
  r.parallelism = DescribeParallelism(job.parallelism);
  r.fill_pct = fill.fill_pct;
  const core::Topology& topo = fill.states.front().topology();
  r.topology = topo.name();

  // Untimed first answer per state: the reference for the metrics and for
  // the determinism check of the timed reps.
  struct First {
    core::Placement placement;
    std::optional<core::PlacementMetrics> metrics;
    std::optional<double> leaf_bound;
  };
  std::vector<First> first;
  first.reserve(fill.states.size());
  for (const core::ClusterState& state : fill.states) {
    First f{placer.Place(job, state), std::nullopt, std::nullopt};
    if (f.placement.placed()) {
      f.metrics = core::Evaluate(job, topo, f.placement.ranks);
      f.leaf_bound = FilledLeafBound(job, state);
    }
    first.push_back(std::move(f));
  }

  std::vector<double> samples;
  samples.reserve(reps);
  Mean tp, ep, leaf, pod, comm, met, bound;
  const int tiers = topo.root_tier() + 1;
  std::array<std::vector<double>, core::kGroupKindCount> hist;
  for (auto& h : hist) h.assign(tiers, 0.0);

  for (int i = 0; i < reps; ++i) {
    const size_t s = static_cast<size_t>(i) % fill.states.size();
    const auto t0 = std::chrono::steady_clock::now();
    core::Placement p = placer.Place(job, fill.states[s]);
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());

    const First& f = first[s];
    const bool same = p.outcome == f.placement.outcome && p.ranks == f.placement.ranks;
    if (!same) ++r.nondeterministic;
    switch (p.outcome) {
      case core::PlaceOutcome::kPlaced:
        ++r.placed;
        break;
      case core::PlaceOutcome::kBusy:
        ++r.busy;
        if (r.busy_reason.empty()) r.busy_reason = p.reason;
        break;
      case core::PlaceOutcome::kInfeasible:
        ++r.infeasible;
        if (r.infeasible_reason.empty()) r.infeasible_reason = p.reason;
        break;
    }
    if (!p.placed()) continue;
    const core::PlacementMetrics m = same ? *f.metrics : core::Evaluate(job, topo, p.ranks);
    tp.Add(m.tp_in_hbd);
    ep.Add(m.ep_in_hbd);
    leaf.Add(m.leaf_span_ratio);
    pod.Add(m.pod_span_ratio);
    comm.Add(m.comm_cost_ratio);
    met.Add(m.required_met ? 1.0 : 0.0);
    bound.Add(same ? f.leaf_bound : FilledLeafBound(job, fill.states[s]));
    for (int k = 0; k < core::kGroupKindCount; ++k) {
      for (int t = 0; t < tiers && t < static_cast<int>(m.tier_histogram[k].size()); ++t) {
        hist[k][t] += m.tier_histogram[k][t];
      }
    }
  }

  r.reps = reps;
  r.latency = Summarize(std::move(samples));
  r.tp_in_hbd = tp.Get();
  r.ep_in_hbd = ep.Get();
  r.leaf_span_ratio = leaf.Get();
  r.pod_span_ratio = pod.Get();
  r.comm_cost_ratio = comm.Get();
  r.required_met = met.Get();
  r.leaf_bound_now = bound.Get();
  for (int k = 0; k < core::kGroupKindCount; ++k) {
    if (r.placed == 0) break;
    r.tier_histogram[k] = hist[k];
    for (double& v : r.tier_histogram[k]) v /= r.placed;
  }
  return r;
}

}  // namespace topo::bench
