// Replay workloads K and S, tenant quotas and load rescaling (sim_workload.hpp).

#include "topo/core/sim_workload.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <numbers>
#include <numeric>
#include <unordered_set>

#include "topo/core/rng.hpp"

namespace topo::core {

namespace {

// A seeded hash of a job index, for deterministic picks that do not depend
// on the order rows come in.
uint64_t JobHash(uint64_t seed, uint64_t salt, int64_t index) {
  Rng r(seed * 0x9E3779B97F4A7C15ULL ^ (salt << 32) ^ static_cast<uint64_t>(index));
  r.Next();
  return r.Next();
}

double StandardNormal(Rng& rng) {
  const double u1 = 1.0 - rng.Uniform();
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

JobSpec LlmLayout(int gpus, int tp, int pp, int ep) {
  JobSpec spec;
  spec.gpus = gpus;
  spec.parallelism.tp = tp;
  spec.parallelism.pp = pp;
  spec.parallelism.dp = gpus / (tp * pp);
  spec.parallelism.ep = ep;
  return spec;
}

// The innermost tier at or above `from` whose largest domain holds `gpus`
// (the root tier when none does).
int InnermostHolding(const Topology& topo, int from, int gpus) {
  int t = from;
  while (t < topo.root_tier() && topo.max_domain_gpus(t) < gpus) ++t;
  return t;
}

}  // namespace

double OfferedLoad(std::span<const SimJob> jobs, int capacity_gpus) {
  if (jobs.empty() || capacity_gpus <= 0) return 0;
  TimeMs first = kNever;
  TimeMs last = 0;
  double work = 0;
  for (const SimJob& j : jobs) {
    first = std::min(first, j.submit);
    last = std::max(last, j.submit);
    work += static_cast<double>(j.request.spec.gpus) * static_cast<double>(j.duration);
  }
  if (last <= first) return 0;
  return work / (static_cast<double>(capacity_gpus) * static_cast<double>(last - first));
}

LoadScaling ScaleToLoad(std::vector<SimJob>& jobs, int capacity_gpus, double target) {
  LoadScaling s;
  s.offered_before = OfferedLoad(jobs, capacity_gpus);
  s.offered_after = s.offered_before;
  if (s.offered_before <= 0 || !(target > 0)) return s;
  s.factor = s.offered_before / target;
  TimeMs first = kNever;
  for (const SimJob& j : jobs) first = std::min(first, j.submit);
  for (SimJob& j : jobs) {
    j.submit = first + std::llround(static_cast<double>(j.submit - first) * s.factor);
  }
  s.offered_after = OfferedLoad(jobs, capacity_gpus);
  return s;
}

void FitEpConstraint(JobSpec& job, const Topology& topology) {
  const Parallelism& p = job.parallelism;
  if (p.ep <= 1) return;
  const int block = p.tp * p.cp * p.ep;
  TierConstraint& c = job.constraints[static_cast<int>(GroupKind::kEp)];
  // Where some part's HBD holds a block, the default (auto: required in the
  // HBD where one holds it) stands.
  for (int part = 0; part < topology.part_count(); ++part) {
    const Topology& view = topology.PartView(part);
    if (view.max_domain_gpus(view.hbd_tier()) >= block) return;
  }
  const int t = InnermostHolding(topology, topology.leaf_tier(), block);
  c.strength = Strength::kPreferred;
  c.tier = t < topology.tier_count() ? topology.tier(t).name : "cluster";
}

TimeMs DefaultTimeLimit(TimeMs duration) {
  const double limit = static_cast<double>(duration) * 1.1;
  return static_cast<TimeMs>(std::ceil(limit / static_cast<double>(kMinute))) * kMinute;
}

namespace {

// Trace row i of a generated LLM workload: its spec named prefix + i, EP
// fitted to the topology, the time limit from its work; no tenant yet.
SimJob LlmJob(const char* prefix, int64_t i, TimeMs submit, TimeMs duration, JobSpec spec,
              const Topology& topology) {
  SimJob job;
  job.index = i;
  job.submit = submit;
  job.duration = std::max<TimeMs>(1, duration);
  job.request.spec = std::move(spec);
  job.request.spec.name = prefix + std::to_string(i);
  FitEpConstraint(job.request.spec, topology);
  job.request.time_limit = DefaultTimeLimit(job.duration);
  return job;
}

}  // namespace

std::vector<TenantConfig> QuotaTenants(const std::string& prefix, std::span<const double> shares,
                                       int capacity_gpus) {
  std::vector<TenantConfig> tenants;
  int given = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    TenantConfig t;
    t.name = prefix + std::to_string(i);
    t.guaranteed_gpus = static_cast<int>(std::floor(shares[i] * capacity_gpus));
    t.shares = shares[i];
    given += t.guaranteed_gpus;
    tenants.push_back(std::move(t));
  }
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  if (!tenants.empty() && total >= 0.999) {
    tenants.front().guaranteed_gpus += capacity_gpus - given;
  }
  return tenants;
}

std::vector<TenantConfig> EqualTenantsFromJobs(std::span<const SimJob> jobs, int capacity_gpus) {
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (const SimJob& j : jobs) {
    const std::string& n = j.request.tenant.empty() ? std::string("default") : j.request.tenant;
    if (seen.insert(n).second) names.push_back(n);
  }
  std::vector<TenantConfig> tenants;
  if (names.empty()) return tenants;
  const int each = capacity_gpus / static_cast<int>(names.size());
  for (const std::string& n : names) {
    TenantConfig t;
    t.name = n;
    t.guaranteed_gpus = each;
    tenants.push_back(std::move(t));
  }
  return tenants;
}

namespace {

// `count` (at least 1) tenants "team0".. with equal shares of the cluster.
std::vector<TenantConfig> EqualTenants(int count, const Topology& topology) {
  const int tenants = std::max(1, count);
  const std::vector<double> shares(tenants, 1.0 / tenants);
  return QuotaTenants("team", shares, topology.total_gpus());
}

}  // namespace

SimWorkload BuildKalosWorkload(std::span<const KalosRow> rows, const Topology& topology,
                               const KalosOptions& options) {
  SimWorkload w;
  w.name = "K";
  w.tenants = EqualTenants(options.tenants, topology);

  // Layout first, then the seeded picks over positions.
  std::vector<size_t> moe_candidates;
  w.jobs.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const KalosRow& row = rows[i];
    const int tp = row.gpus >= 8 ? 8 : 1;
    int pp = 1;
    if (row.pretrain && row.gpus >= options.pp_from_gpus && row.gpus % (tp * options.pp) == 0) {
      pp = options.pp;
    }
    SimJob job;
    job.index = row.index;
    job.submit = static_cast<TimeMs>(row.submit_s) * kSecond;
    job.duration = std::max<TimeMs>(1, std::llround(row.duration_s * 1000.0));
    job.request.spec = LlmLayout(row.gpus, tp, pp, 1);
    job.request.spec.name = "kalos-" + std::to_string(row.index);
    job.request.time_limit = DefaultTimeLimit(job.duration);
    if (pp > 1 && job.request.spec.parallelism.dp % options.ep == 0) moe_candidates.push_back(i);
    w.jobs.push_back(std::move(job));
  }

  std::vector<size_t> order(w.jobs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto by_hash = [&](uint64_t salt) {
    return [&, salt](size_t a, size_t b) {
      const uint64_t ha = JobHash(options.seed, salt, w.jobs[a].index);
      const uint64_t hb = JobHash(options.seed, salt, w.jobs[b].index);
      return ha != hb ? ha < hb : a < b;
    };
  };
  std::sort(order.begin(), order.end(), by_hash(1));
  for (size_t r = 0; r < order.size(); ++r) {
    w.jobs[order[r]].request.tenant = w.tenants[r % w.tenants.size()].name;
  }
  std::sort(moe_candidates.begin(), moe_candidates.end(), by_hash(2));
  const int every = std::max(1, options.moe_every);
  for (size_t r = 0; r < moe_candidates.size(); r += every) {
    JobSpec& spec = w.jobs[moe_candidates[r]].request.spec;
    spec.parallelism.ep = options.ep;
    FitEpConstraint(spec, topology);
  }
  return w;
}

SimWorkload GenerateSynthetic(const Topology& topology, const SyntheticOptions& options) {
  SimWorkload w;
  w.name = "S";
  static constexpr double kShares[] = {0.25, 0.20, 0.15, 0.10, 0.10, 0.08, 0.07, 0.05};
  w.tenants = QuotaTenants("team", kShares, topology.total_gpus());

  const int top = std::min(options.max_gpus, topology.total_gpus());
  std::vector<int> sizes;
  std::vector<double> cumulative;
  double total = 0;
  for (int64_t s = std::max(1, options.min_gpus); s <= top; s *= 2) {
    sizes.push_back(static_cast<int>(s));
    total += std::pow(static_cast<double>(s), -options.size_exponent);
    cumulative.push_back(total);
  }
  if (sizes.empty()) return w;
  for (double& c : cumulative) c /= total;
  std::vector<double> tenant_cumulative;
  double t_total = 0;
  for (double share : kShares) tenant_cumulative.push_back(t_total += share);

  Rng rng(options.seed * 0x2545F4914F6CDD1DULL + 0x5EED);
  w.jobs.reserve(std::max(0, options.jobs));
  TimeMs t = 0;
  for (int i = 0; i < options.jobs; ++i) {
    // A fixed number of draws per job keeps job i the same whatever the rest.
    const double u_gap = rng.Uniform();
    const double u_size = rng.Uniform();
    const double z_duration = StandardNormal(rng);
    const double u_tenant = rng.Uniform();
    const double u_moe = rng.Uniform();

    t += std::llround(-std::log(1.0 - u_gap) * static_cast<double>(kMinute));
    const size_t k = static_cast<size_t>(
        std::lower_bound(cumulative.begin(), cumulative.end(), u_size) - cumulative.begin());
    const int gpus = sizes[std::min(k, sizes.size() - 1)];
    const double median =
        static_cast<double>(options.median_duration_small) *
        std::pow(static_cast<double>(gpus) / sizes.front(), options.duration_size_exponent);
    TimeMs duration = std::llround(median * std::exp(options.duration_sigma * z_duration));
    duration = std::clamp(duration, options.min_duration, options.max_duration);
    const size_t tenant = static_cast<size_t>(
        std::lower_bound(tenant_cumulative.begin(), tenant_cumulative.end(), u_tenant * t_total) -
        tenant_cumulative.begin());

    const int tp = std::gcd(gpus, 8);
    const int pp = std::gcd(gpus >= 4096 ? 8 : gpus >= 256 ? 4 : 1, gpus / tp);
    int ep = 1;
    if (gpus >= options.moe_from_gpus && u_moe < options.moe_share && (gpus / (tp * pp)) % 8 == 0) {
      ep = 8;
    }
    SimJob job = LlmJob("s-", i, t, duration, LlmLayout(gpus, tp, pp, ep), topology);
    job.request.tenant = w.tenants[std::min(tenant, w.tenants.size() - 1)].name;
    w.jobs.push_back(std::move(job));
  }
  if (options.load > 0) ScaleToLoad(w.jobs, topology.total_gpus(), options.load);
  return w;
}

namespace {

// The named GPU models of a topology with their GPUs, in gpu_models() order.
struct ModelCapacity {
  std::string model;
  int64_t gpus = 0;
};
std::vector<ModelCapacity> ModelCapacities(const Topology& topology) {
  std::vector<ModelCapacity> out;
  for (const std::string& m : topology.gpu_models()) {
    if (!m.empty()) out.push_back({m, 0});
  }
  for (NodeId n = 0; n < topology.node_count(); ++n) {
    for (ModelCapacity& c : out) {
      if (c.model == topology.node(n).gpu_model) c.gpus += topology.node(n).gpus;
    }
  }
  return out;
}

// Subsets of up to this many models are enumerated for jobs naming several.
constexpr size_t kMaxEnumeratedModels = 12;

}  // namespace

SimWorkload GenerateMixed(const Topology& topology, const MixedOptions& options) {
  SimWorkload w;
  w.name = "M";
  w.tenants = EqualTenants(options.tenants, topology);

  std::vector<double> size_cumulative;
  double size_total = 0;
  for (const MixedSize& s : kMixedSizes) size_cumulative.push_back(size_total += s.weight);
  const std::vector<ModelCapacity> models = ModelCapacities(topology);
  const size_t enumerated = std::min(models.size(), kMaxEnumeratedModels);
  size_t largest = 0;
  for (size_t m = 0; m < models.size(); ++m) {
    if (models[m].gpus > models[largest].gpus) largest = m;
  }

  Rng rng(options.seed * 0xD1342543DE82EF95ULL + 0x313D);
  w.jobs.reserve(std::max(0, options.jobs));
  TimeMs t = 0;
  std::vector<size_t> one;        // candidate models for one type
  std::vector<uint32_t> several;  // candidate sets (bit masks over models)
  for (int i = 0; i < options.jobs; ++i) {
    const double u_gap = rng.Uniform();
    const double u_size = rng.Uniform();
    const double z_duration = StandardNormal(rng);
    const double u_tenant = rng.Uniform();
    const double u_moe = rng.Uniform();
    const double u_selection = rng.Uniform();
    const double u_types = rng.Uniform();

    t += std::llround(-std::log(1.0 - u_gap) * static_cast<double>(kMinute));
    const size_t k = static_cast<size_t>(
        std::upper_bound(size_cumulative.begin(), size_cumulative.end(), u_size * size_total) -
        size_cumulative.begin());
    const int gpus = kMixedSizes[std::min(k, std::size(kMixedSizes) - 1)].gpus;
    const double median = static_cast<double>(options.median_duration_small) *
                          std::pow(static_cast<double>(gpus) / 8.0, options.duration_size_exponent);
    TimeMs duration = std::llround(median * std::exp(options.duration_sigma * z_duration));
    duration = std::clamp(duration, options.min_duration, options.max_duration);

    const int tp = gpus >= 8 ? std::gcd(gpus, 8) : 1;
    const int pp = gpus >= options.pp_from_gpus && gpus % (tp * options.pp) == 0 ? options.pp : 1;
    int ep = 1;
    if (pp > 1 && u_moe < options.moe_share && (gpus / (tp * pp)) % options.ep == 0) {
      ep = options.ep;
    }
    SimJob job = LlmJob("m-", i, t, duration, LlmLayout(gpus, tp, pp, ep), topology);
    job.request.tenant =
        w.tenants[std::min<size_t>(
                      static_cast<size_t>(u_tenant * static_cast<double>(w.tenants.size())),
                      w.tenants.size() - 1)]
            .name;

    std::vector<std::string>& types = job.request.spec.selection.gpu_types;
    if (!models.empty() && u_selection < options.one_type_share) {
      one.clear();
      double weight = 0;
      for (size_t m = 0; m < models.size(); ++m) {
        if (models[m].gpus >= gpus) {
          one.push_back(m);
          weight += static_cast<double>(models[m].gpus);
        }
      }
      size_t pick = largest;
      double at = u_types * weight;
      for (size_t m : one) {
        pick = m;
        at -= static_cast<double>(models[m].gpus);
        if (at < 0) break;
      }
      types.push_back(models[pick].model);
    } else if (!models.empty() &&
               u_selection < options.one_type_share + options.several_types_share) {
      several.clear();
      for (uint32_t set = 1; set < (1u << enumerated); ++set) {
        if (std::popcount(set) < 2) continue;
        int64_t held = 0;
        for (size_t m = 0; m < enumerated; ++m) held += (set >> m & 1) ? models[m].gpus : 0;
        if (held >= gpus) several.push_back(set);
      }
      if (several.empty()) {
        for (const ModelCapacity& m : models) types.push_back(m.model);
      } else {
        const size_t pick = std::min(
            static_cast<size_t>(u_types * static_cast<double>(several.size())), several.size() - 1);
        for (size_t m = 0; m < enumerated; ++m) {
          if (several[pick] >> m & 1) types.push_back(models[m].model);
        }
      }
    }
    w.jobs.push_back(std::move(job));
  }
  if (options.load > 0) ScaleToLoad(w.jobs, topology.total_gpus(), options.load);
  return w;
}

SimWorkload WithoutGpuTypes(const SimWorkload& workload, const Topology& topology,
                            const std::string& name) {
  SimWorkload w = workload;
  w.name = name;
  for (SimJob& j : w.jobs) {
    j.request.spec.selection.gpu_types.clear();
    TierConstraint& ep = j.request.spec.constraints[static_cast<int>(GroupKind::kEp)];
    ep = JobSpec::DefaultConstraints()[static_cast<int>(GroupKind::kEp)];
    FitEpConstraint(j.request.spec, topology);
  }
  return w;
}

}  // namespace topo::core
