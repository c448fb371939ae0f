#pragma once
// The step-time model: how long one optimizer step of a job takes on a
// placement, and how much slower that is than on the best placement of the
// empty cluster. Pure (no I/O, clock or randomness); the formulas are stated
// at the top of perf_model.cpp and in docs/perf-model.md, every constant with
// its source.
//
//   ResolvedModel m = ResolveModel(job).value();
//   CommSpans spans = AnalyzePlacement(job, topology, placement.ranks);
//   StepBreakdown now = PredictStep(job, m, topology, spans);
//   StepBreakdown best = PredictStep(job, m, topology, IdealSpans(job, topology));
//   double slowdown = now.total_s / best.total_s;
//
// Cost: AnalyzePlacement is O(ranks x kinds); PredictStep is O(tiers) and
// allocates nothing, so a caller can re-predict cheaply when link shares
// change (the simulator's contention) or compare candidate placements.
//
// Thread safety: free functions over const inputs; safe from any thread.

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

// ---------------------------------------------------------------- models

// Built-in presets: llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b,
// deepseek-v3 (published shapes; docs/perf-model.md cites each).
std::vector<std::string> ModelPresetNames();
// nullopt for an unknown name.
std::optional<ModelSpec> ModelPreset(std::string_view name);

// A ModelSpec with every field filled and the derived figures the formulas
// use.
struct ResolvedModel {
  ModelSpec spec;                // every field > 0 (kv_heads, recompute filled)
  double dense_parameters = 0;   // parameters outside the routed experts
  double expert_parameters = 0;  // parameters of all routed experts
  int microbatches = 1;          // per pipeline per step: global / (dp x micro)
  bool moe = false;
};

// Fills a job's model: given fields win, then the preset's, then the
// default model sized from the layout (docs/perf-model.md, "Default model"):
// a Llama 3-shaped model chosen by the model-parallel size tp x pp (<= 8:
// llama3-8b, <= 32: llama3-70b, else llama3-405b; with ep > 1: mixtral-8x7b
// for ep <= 8, else deepseek-v3), global batch dp x micro x max(8, 4 x pp).
// Errors: an unknown preset, a top_k above experts, active above total
// parameters, each naming the field.
// REQUIRES: ValidateJobSpec(job).ok()
Result<ResolvedModel> ResolveModel(const JobSpec& job);

// Sustained dense BF16 rate of one accelerator for transformer training,
// FLOP/s: the datasheet peak times kSustainedFraction (docs/perf-model.md).
// Matches "H100"/"H800"/"H200", "A100"/"A800", "GB200"/"B200", "910C";
// anything else (and "") is taken as an H100.
double SustainedFlops(std::string_view gpu_model);
inline constexpr double kSustainedFraction = 0.55;

// ---------------------------------------------------------------- spans

// Where the groups of one kind sit, as the formulas need it: for every tier
// t, the fewest members per child domain (of tier t - 1) among the groups
// whose widest span is t (0 when no group spans exactly t). The group a
// collective waits for is the one with the least effective bandwidth
// (EffectiveBandwidth), found over these few entries.
struct KindSpan {
  std::vector<double> min_members_per_child;  // by tier, root included
  int size = 1;                               // ranks per group
};
struct CommSpans {
  // Indexed by GroupKind. kPp describes the links between consecutive
  // pipeline stages (pairs of ranks), not the whole pipeline.
  std::array<KindSpan, kGroupKindCount> kind;
};

// REQUIRES: ValidateJobSpec(job).ok(); ranks.size() == job.gpus.
CommSpans AnalyzePlacement(const JobSpec& job, const Topology& topology,
                           std::span<const GpuSlot> ranks);
// The best placement on the empty cluster: every group at the innermost tier
// whose largest domain holds it, with all its members in one child (the
// lower bound of comm_cost_ratio, evaluator.hpp).
CommSpans IdealSpans(const JobSpec& job, const Topology& topology);

// ---------------------------------------------------------------- links

// Per-tier link bandwidth as the job sees it. The default is the topology's
// links; the simulator scales the tiers a job shares with its neighbours
// (scale[t] multiplies tier t's bandwidth; an empty span means 1).
struct LinkView {
  const Topology* topology = nullptr;
  std::span<const double> scale;
  double bandwidth(int tier) const;  // GB/s per GPU, running minimum from tier 0
  double latency(int tier) const;    // us per step, running maximum from tier 0
};

// Bus bandwidth (GB/s per GPU) of a collective over a group whose widest
// span is `tier` with g members per child domain: min(bandwidth(tier - 1),
// g x bandwidth(tier)); at tier 0, bandwidth(0).
double EffectiveBandwidth(const LinkView& links, int tier, double members_per_child);

// ---------------------------------------------------------------- step

// Seconds per optimizer step: what each part adds to the step (exposed
// time), and the total. dp is the part of the gradient reduction that the
// backward pass does not hide; dp_raw_s the whole of it.
struct StepBreakdown {
  double compute_s = 0;
  double tp_s = 0;
  double cp_s = 0;
  double ep_s = 0;
  double pp_s = 0;
  double dp_s = 0;
  double bubble_s = 0;
  double total_s = 0;
  double dp_raw_s = 0;
  double flops = 0;  // model FLOPs per step, whole job
};

// REQUIRES: ValidateJobSpec(job).ok(); spans from AnalyzePlacement or
// IdealSpans for this job and topology; the job's GPU model is the most
// common model of the topology's nodes unless gpu_model is given.
StepBreakdown PredictStep(const JobSpec& job, const ResolvedModel& model, const LinkView& links,
                          const CommSpans& spans, double sustained_flops);

// The whole prediction for `topo place`: on the placement, at the ideal
// placement, and the slowdown (>= 1 up to rounding).
struct StepPrediction {
  StepBreakdown step;
  StepBreakdown ideal;
  double slowdown = 1;
};
// The compute rate of a placement (SustainedFlops): the slowest GPU model
// among the ranks' nodes, since every rank waits for the slowest at each
// synchronous step; the topology's dominant model for no ranks.
double SlowestRankRate(const Topology& topology, std::span<const GpuSlot> ranks);

// On a mixed cluster the links are the first rank's part's (its view), the
// rate SlowestRankRate's: for a job split by DP replica over parts the DP
// all-reduce is costed on that part's view of the tree, an approximation.
// REQUIRES: ValidateJobSpec(job).ok(); ranks.size() == job.gpus.
Result<StepPrediction> PredictPlacement(const JobSpec& job, const Topology& topology,
                                        std::span<const GpuSlot> ranks);
// The GPU model the prediction assumes for a topology: its most common
// node model ("" when the nodes name none).
std::string DominantGpuModel(const Topology& topology);

}  // namespace topo::core
