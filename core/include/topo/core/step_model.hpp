#pragma once
// StepTimeModel: the step-time model (perf_model.hpp) bound to one topology,
// with what depends only on a job's shape computed once per shape. It sits
// beside the placers: the toposched placer ranks its candidate placements
// with it, the brain weighs waiting and preemption with it, and `topo show`
// and the daemon's job view report it.
//
//   StepTimeModel steps(topology);
//   std::optional<StepPrediction> p = steps.Predict(job.spec, placement.ranks);
//   p->step.total_s, p->ideal.total_s, p->slowdown
//
// A job shape is its parallelism (degrees and rank order) and its model; the
// resolved model, the ideal spans (IdealSpans) and the ideal step are cached
// per shape, so a prediction costs one AnalyzePlacement (O(ranks x kinds))
// and one PredictStep (O(tiers)).
//
// Two views of the links:
//   kIdle       every fabric at its full per-GPU bandwidth (perf_model.hpp):
//               what `topo place` and `topo show` print.
//   kSaturated  every oversubscribed tier (oversubscription o > 1) at 1/o of
//               it: the share each GPU gets when every GPU under that fabric
//               sends across it at once (the simulator's fair-share rule at
//               full load). The placer and the brain rank placements by it,
//               so a placement that leans on an oversubscribed fabric is
//               counted as slow before its neighbours make it so.
//
// Thread safety: none (the cache is mutable state); one owner.

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "topo/core/perf_model.hpp"

namespace topo::core {

enum class LinkLoad : uint8_t { kIdle, kSaturated };

class StepTimeModel {
 public:
  // REQUIRES: topology outlives this.
  explicit StepTimeModel(const Topology& topology);

  // The job's step on `ranks`, at its ideal placement, and the slowdown
  // (>= 1), with the links in `load`; nullopt when its model cannot be
  // resolved (ResolveModel's error: a custom model missing fields).
  // The rate is that of the GPU model of ranks[0]'s node.
  // REQUIRES: ValidateJobSpec(job).ok(); ranks.size() == job.gpus.
  std::optional<StepPrediction> Predict(const JobSpec& job, std::span<const GpuSlot> ranks,
                                        LinkLoad load = LinkLoad::kIdle);
  // Only the step on `ranks`, seconds (0 when the model cannot be resolved).
  double StepSeconds(const JobSpec& job, std::span<const GpuSlot> ranks, LinkLoad load);
  // The step at the job's ideal placement on the empty cluster, with the
  // topology's most common GPU model (0 when the model cannot be resolved).
  double IdealSeconds(const JobSpec& job, LinkLoad load = LinkLoad::kIdle);

  // Shapes cached so far (tests, memory checks).
  size_t cached_shapes() const { return shapes_.size(); }

 private:
  struct Shape {
    bool ok = false;
    JobSpec job;  // the first job of this shape
    ResolvedModel model;
    CommSpans ideal_spans;
    StepBreakdown ideal[2];  // by LinkLoad, once ideal_done
    bool ideal_done[2] = {false, false};
  };
  Shape& ShapeOf(const JobSpec& job);
  const StepBreakdown& IdealOf(Shape& s, LinkLoad load);
  double DominantRate();
  LinkView Links(LinkLoad load) const;
  double RateOf(NodeId node);

  const Topology& topo_;
  std::vector<double> saturated_scale_;  // per tier: 1/o where o > 1, else 1
  double dominant_rate_ = 0;             // DominantRate(), once computed
  std::map<std::string, Shape> shapes_;
  std::map<std::string, double> rates_;  // sustained FLOP/s per GPU model
};

}  // namespace topo::core
