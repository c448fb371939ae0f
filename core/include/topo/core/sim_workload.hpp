#pragma once
// Replay workloads of ../shared/BENCHMARKS.md, as pure functions: the Kalos
// layout rule (K), the synthetic LLM mix (S), tenant quotas and the
// offered-load rescaling. Files are parsed in common/ (trace_io.hpp).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "topo/core/sim.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

// ---------------------------------------------------------------- load

// Offered load = sum(gpus x duration) / (capacity x arrival span), where the
// arrival span is last submit - first submit. 0 for fewer than two distinct
// submit times or no capacity.
double OfferedLoad(std::span<const SimJob> jobs, int capacity_gpus);

struct LoadScaling {
  double offered_before = 0;
  double offered_after = 0;
  // Arrival times (relative to the first submission) were multiplied by it:
  // factor = offered_before / target. 1 when the load is undefined.
  double factor = 1;
};
// Rescales arrivals so the offered load becomes `target`.
// REQUIRES: target > 0.
LoadScaling ScaleToLoad(std::vector<SimJob>& jobs, int capacity_gpus, double target);

// ---------------------------------------------------------------- layouts

// Keeps a job feasible on topologies whose HBD is smaller than its EP block
// (tp x cp x ep GPUs, e.g. 64 on 8-GPU nodes): the default "EP required in
// one HBD" is then relaxed to "EP preferred in the innermost tier above the
// HBD that holds a block" (the cluster when none does). Jobs with ep == 1 and
// jobs whose block fits the HBD are left alone.
void FitEpConstraint(JobSpec& job, const Topology& topology);

// The user's time limit when a trace has none: the duration plus 10 %,
// rounded up to a minute. EASY backfill plans with it.
TimeMs DefaultTimeLimit(TimeMs duration);

// Tenants "prefix0" .. with guaranteed GPUs proportional to `shares`
// (rounded down; the rest goes to the first tenant), no borrowing limit and
// fairshare weights equal to the shares.
std::vector<TenantConfig> QuotaTenants(const std::string& prefix, std::span<const double> shares,
                                       int capacity_gpus);
// One tenant per distinct name in the jobs (in first-seen order) with equal
// guaranteed GPUs; for traces that name their tenants.
std::vector<TenantConfig> EqualTenantsFromJobs(std::span<const SimJob> jobs, int capacity_gpus);

// ---------------------------------------------------------------- K

// One row of ../shared/data/traces/kalos-llm/jobs.csv.
struct KalosRow {
  int64_t index = 0;     // job_idx
  int64_t submit_s = 0;  // submit_offset_s
  double duration_s = 0;
  int gpus = 0;           // gpu_num
  int gpus_per_node = 0;  // from the trace (8, or the whole job when smaller)
  bool pretrain = false;  // job_class == "Pretrain"
};

// Workload K. The layout rule:
//   - jobs of >= 8 GPUs: TP 8; smaller jobs TP 1 (all data parallel, one node);
//   - Pretrain jobs of >= pp_from_gpus (256) GPUs: PP 4 when gpus divides by
//     8 x 4 (else PP 1);
//   - of those, one in `moe_every` (3) is MoE with EP 8 (when ep divides dp):
//     the jobs are ordered by a seeded hash of their index and every third
//     one is chosen; FitEpConstraint then applies;
//   - gpus_per_node from the trace (whole 8-GPU nodes);
//   - tenants: `tenants` (4) tenants "team0".. with equal guaranteed quotas,
//     assigned round-robin over the jobs ordered by a seeded hash;
//   - time limit DefaultTimeLimit(duration); the config's checkpoint
//     interval (30 min); submit and duration from the trace, in ms.
struct KalosOptions {
  uint64_t seed = 1;
  int tenants = 4;
  int pp_from_gpus = 256;
  int pp = 4;
  int moe_every = 3;
  int ep = 8;
};
SimWorkload BuildKalosWorkload(std::span<const KalosRow> rows, const Topology& topology,
                               const KalosOptions& options);

// ---------------------------------------------------------------- S

// Workload S, a synthetic LLM mix, seeded:
//   - sizes 8 x 2^k GPUs, k = 0..11 (8 .. 16,384), P(size) proportional to
//     1 / size (heavy tail: half the jobs are 8-GPU jobs, ~1.6 % are >= 512,
//     ~0.8 % >= 1,024; the largest classes hold most GPU-hours); sizes above
//     the cluster's capacity are left out;
//   - duration lognormal: median 45 min x (size / 8)^0.3 (45 min at 8 GPUs,
//     ~7.4 h at 16,384), log-sd 1.0, clamped to [1 min, 7 days];
//   - arrivals Poisson, then rescaled so the offered load is `load`;
//   - layout TP 8; PP 4 from 256 GPUs, PP 8 from 4,096; the rest DP; one in
//     four jobs of >= 64 GPUs is MoE with EP 8 (FitEpConstraint applies);
//     whole nodes;
//   - 8 tenants "team0".."team7" with guaranteed shares 25, 20, 15, 10, 10,
//     8, 7, 5 % of the capacity; a job's tenant is drawn with the same
//     probabilities;
//   - time limit DefaultTimeLimit(duration); the config's checkpoint
//     interval (30 min).
struct SyntheticOptions {
  uint64_t seed = 1;
  int jobs = 100000;
  double load = 0.9;
  int min_gpus = 8;
  int max_gpus = 16384;
  double size_exponent = 1.0;  // P(size) ~ size^-exponent
  TimeMs median_duration_small = 45 * kMinute;
  double duration_size_exponent = 0.3;
  double duration_sigma = 1.0;
  TimeMs min_duration = kMinute;
  TimeMs max_duration = 7 * 24 * kHour;
  double moe_share = 0.25;  // of jobs >= moe_from_gpus
  int moe_from_gpus = 64;
};
// REQUIRES: options.jobs >= 0; the topology has at least min_gpus GPUs.
SimWorkload GenerateSynthetic(const Topology& topology, const SyntheticOptions& options);

// ---------------------------------------------------------------- M

// Workload M, for mixed clusters (mixed-10k), seeded; docs/sim.md:
//   - sizes drawn with the Kalos trace's histogram rounded to powers of two
//     (kMixedSizes: 1, 2, 8 .. 1,024 GPUs; a quarter are 512-GPU jobs);
//   - durations as workload S's (lognormal, median 45 min x (size / 8)^0.3,
//     log-sd 1.0, clamped to [1 min, 7 days]); arrivals Poisson, rescaled so
//     the offered load over the whole cluster is `load`;
//   - layouts as K's: TP 8 from 8 GPUs (TP 1 below); PP 4 from 256 GPUs;
//     one in three of those (drawn) MoE with EP 8 (an EP block of 64 GPUs:
//     required in an NVL72 rack, preferred in a leaf of HGX nodes, the
//     default kAuto; FitEpConstraint applies);
//   - node selection: with probability one_type_share the job names one GPU
//     model, drawn among the models with at least its GPUs, with
//     probability proportional to their GPUs; with several_types_share it
//     names two or more, a set drawn uniformly among the sets of two or more
//     models whose GPUs together hold it; the rest name none. A job no model
//     (or no set) can hold names the largest model (one type) or every
//     model (several);
//   - tenants "team0".. (`tenants`) with equal guaranteed quotas, drawn
//     uniformly per job; time limit DefaultTimeLimit(duration).
// A fixed number of draws per job keeps job i the same whatever the rest.
struct MixedOptions {
  uint64_t seed = 1;
  int jobs = 2000;
  double load = 0.9;
  double one_type_share = 0.4;
  double several_types_share = 0.2;  // the rest (0.4) name no type
  int tenants = 4;
  int pp_from_gpus = 256;
  int pp = 4;
  double moe_share = 1.0 / 3;  // of the jobs with PP
  int ep = 8;
  TimeMs median_duration_small = 45 * kMinute;  // at 8 GPUs
  double duration_size_exponent = 0.3;
  double duration_sigma = 1.0;
  TimeMs min_duration = kMinute;
  TimeMs max_duration = 7 * 24 * kHour;
};
// Job sizes and their weights: the Kalos trace's jobs by size, each rounded
// to the nearest power of two (96 -> 128, 296 and 320 -> 256, 496 and 504 ->
// 512, 1,016 -> 1,024).
struct MixedSize {
  int gpus;
  int weight;
};
inline constexpr MixedSize kMixedSizes[] = {{1, 29},  {2, 41},  {8, 19},   {16, 11},  {32, 14},
                                            {64, 22}, {128, 6}, {256, 54}, {512, 84}, {1024, 39}};
// REQUIRES: options.jobs >= 0; one_type_share + several_types_share <= 1.
SimWorkload GenerateMixed(const Topology& topology, const MixedOptions& options);

// The same jobs for a homogeneous cluster: every job's gpu_types dropped and
// its EP constraint reset to the default and fitted to `topology`
// (FitEpConstraint); tenants, arrivals and durations kept (the cluster is
// meant to have the same capacity). Names the workload `name`.
SimWorkload WithoutGpuTypes(const SimWorkload& workload, const Topology& topology,
                            const std::string& name);

}  // namespace topo::core
