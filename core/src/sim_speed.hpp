#pragma once
// The simulator's speed model (sim.hpp, "Speed"): each running job's speed
// (work per unit of wall time) = its ideal step time / its step time on its
// placement with its neighbours' traffic. Internal to core/src.
//
// Contention, the fair-share rule: a fabric of tier T inside domain D whose
// tier is oversubscribed (o_T > 1) carries at most B_T x gpus(D) / o_T at
// once. A running job crosses it when it has a communication group whose
// widest span is T or above and its GPUs under D sit in two or more children
// of D; it then demands B_T for each of its GPUs under D. When the demands
// exceed the capacity, every crossing GPU gets the same share:
// scale_T = min(1, gpus(D) / (o_T x crossing GPUs(D))); a job's tier-T
// bandwidth is scaled by the smallest scale_T of the domains it crosses.
// Non-oversubscribed tiers never contend (a non-blocking fabric).
//
// Cost: Start/Stop are O(ranks x oversubscribed tiers) for the job itself
// plus O(neighbours) re-predictions of O(tiers) each; nothing is done for
// jobs on fabrics that do not change.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "topo/core/perf_model.hpp"

namespace topo::core::internal {

class SpeedModel {
 public:
  // cross_hbd_scale multiplies the bandwidth of every tier above the HBD
  // (the sensitivity runs).
  SpeedModel(const Topology& topology, double cross_hbd_scale);

  // The job's step time on the best placement of the empty cluster, in
  // seconds (0 when its model cannot be resolved: then it runs at speed 1).
  double IdealStep(const JobSpec& spec);
  double IdealStep(const JobSpec& spec, const Topology& view);
  // Its step time with every group spanning the whole cluster, one member
  // per child, unloaded, over the ideal: the most any placement alone can
  // slow it down.
  double WorstSlowdown(const JobSpec& spec);

  // A job starts on ranks. Appends to *changed the running jobs (other than
  // pos) whose speed may have changed.
  void Start(int32_t pos, const JobSpec& spec, std::span<const GpuSlot> ranks,
             std::vector<int32_t>* changed);
  void Stop(int32_t pos, std::vector<int32_t>* changed);
  // Work per wall time of a running job, in (0, 1].
  double Speed(int32_t pos) const;

 private:
  struct Crossing {
    DomainId domain;
    int tier;
    int gpus;
  };
  struct Running {
    const JobSpec* spec = nullptr;
    const Topology* view = nullptr;  // the part it runs on
    ResolvedModel model;
    CommSpans spans;
    double rate = 0;
    double ideal = 0;
    double speed = 1;
    std::vector<Crossing> crossings;
    std::vector<double> scale;  // the link scales its speed was predicted with
    bool ideal_done = false;    // speed predicted at least once
  };
  struct Fabric {
    int demand = 0;
    std::vector<int32_t> jobs;
  };
  void Recompute(int32_t pos);
  double ScaleOf(const Crossing& c) const;

  const Topology& topo_;
  std::vector<double> base_scale_;   // per tier incl. root
  std::vector<int> oversubscribed_;  // tiers with oversubscription > 1
  std::unordered_map<int32_t, Running> running_;
  std::unordered_map<DomainId, Fabric> fabrics_;
  std::vector<double> scale_;  // scratch
  double rate_ = 0;            // sustained FLOP/s of the cluster's most common GPU
};

}  // namespace topo::core::internal
