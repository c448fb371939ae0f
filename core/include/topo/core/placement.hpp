#pragma once
// Placement of one gang job on a cluster snapshot.
//
// A placer answers with the full rank -> (node, GPU) map. Outcomes:
//   kPlaced     every rank has one free usable GPU; ranks[r] is rank r's GPU.
//   kBusy       the job fits the cluster as built, not its free capacity now:
//               wait. reason says what is short.
//   kInfeasible the job can never fit as asked (a group larger than any
//               domain of its required tier, more GPUs than the cluster has,
//               an unknown tier): reject. reason says why and what to change.
//
// Placers are policies behind one interface, created by name in MakePlacer;
// algorithms never switch on a policy name. They are pure and deterministic:
// the same job on the same state gives the same answer. Place() never
// mutates the state; apply a placement with ClusterState::Allocate.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"

namespace topo::core {

enum class PlaceOutcome : uint8_t { kPlaced, kBusy, kInfeasible };
std::string_view PlaceOutcomeName(PlaceOutcome o);

struct Placement {
  PlaceOutcome outcome = PlaceOutcome::kInfeasible;
  std::string reason;
  std::vector<GpuSlot> ranks;  // rank r -> GPU, when placed
  std::vector<NodeId> spares;  // whole free nodes held for recovery

  bool placed() const { return outcome == PlaceOutcome::kPlaced; }
};

struct PlacerOptions {
  // Degraded GPUs are used only by jobs of at most this many GPUs; larger
  // gangs avoid them (one slow GPU stalls every collective of a gang).
  int degraded_max_job_gpus = 8;
  // When a job does not fit now, tell Busy from Infeasible (an analysis of
  // the empty cluster, O(cluster)). A caller that has already checked the job
  // against the empty cluster (the scheduler, at submission) turns it off:
  // then every "does not fit now" is Busy, with a short reason.
  bool explain_shortfall = true;
  // toposched: where the fewest-leaves choice spans several domains above
  // the leaf, also build the fewest-pods choice and keep the one the
  // step-time model predicts faster (then the one spanning less). Off: the
  // fewest leaves always (the property tests check that optimum).
  bool choose_by_speed = true;
};

class Placer {
 public:
  virtual ~Placer() = default;
  virtual std::string_view name() const = 0;
  // REQUIRES: ValidateJobSpec(job).ok()
  virtual Placement Place(const JobSpec& job, const ClusterState& state) const = 0;
};

// The nodes a job may run on, by node (open[n] != 0): its selection's hard
// rules (gpu_types, features, nodelist, exclude), on a mixed cluster only
// the part `part` (-1: any part), and without its avoided nodes unless
// with_avoided. A selection the topology cannot meet (a type it does not
// have) admits no node. What a restart may use beside the job's own nodes.
std::vector<uint8_t> AdmittedNodes(const JobSpec& job, const Topology& topology, int part,
                                   bool with_avoided);

// Every placer honours the job's NodeSelection; "toposched" also runs a job
// on one part of a mixed cluster (Topology parts), choosing the part whose
// placement the step-time model predicts fastest, while the baselines place
// over the whole tree as Slurm does. A job that names several GPU types
// (and no nodelist, and no required DP constraint) that no one admitted
// part can hold even empty is split by whole outer-DP replicas (tp x cp x
// ep x pp ranks each) over the parts it names: fastest part first, as many
// replicas as place there, the rest on the next; each replica keeps its
// part's constraints, only the DP groups cross parts, the spares go with
// the largest share. Busy when the empty parts would hold the replicas,
// else Infeasible. PredictPlacement and Evaluate judge such a placement on
// the first rank's part's view (perf_model.hpp says what that assumes).
// Policies: "toposched" (default), "slurm-tree", "first-fit".
// Returns nullptr for an unknown name.
std::unique_ptr<Placer> MakePlacer(std::string_view name, const PlacerOptions& options = {});
std::vector<std::string> PlacerNames();

}  // namespace topo::core
