#pragma once
// What a start or restart needs on every node, decided by the core so that
// the daemon turns a StartJob/RestartJob into agent messages without reading
// the core's state back (docs/jobs.md has the rank environment it becomes).
//
//   Launch l = MakeLaunch(job, ranks, restart_count, step, port);
//
// Rank numbering is the job's layout order (RANK); the placement decides
// which node and GPU each rank gets. On each node:
//   - the node's ranks ascending are local ranks 0..k-1 (LOCAL_RANK), and
//     the node's GPUs in that order are CUDA_VISIBLE_DEVICES, so LOCAL_RANK
//     indexes it (torch.cuda.set_device(LOCAL_RANK) is right);
//   - nodes are numbered 0..N-1 by their lowest rank (GROUP_RANK): distinct
//     per node, and RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK
//     whenever every node holds one contiguous block of ranks of equal size,
//     as the placers give dense layouts on whole nodes.
//
// MasterPorts hands out MASTER_PORT per master node from a range outside the
// ephemeral ports, rotating so a port is not reused by the next job or the
// next restart, and never handing out a port a running job on that node
// still holds.
//
// Pure and deterministic; no I/O.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

struct SnapshotAccess;
// How the agent starts a job's processes on each node, and with what
// environment, directory and files (docs/jobs.md). Carried from the job's
// request to every start, never interpreted by the core; the checks live at
// the boundaries (common/include/topo/common/job_process.hpp).
enum class LaunchMode : uint8_t {
  kRank,  // one process per rank (GPU), with the torchrun worker environment
  kNode,  // one process per node, with the environment torchrun itself reads
};
struct ProcessSpec {
  LaunchMode launch = LaunchMode::kRank;
  std::map<std::string, std::string> env;  // the job's own variables
  std::string working_dir;                 // absolute; empty: the account's home
  // Where standard output and error go: patterns with %j (job id), %r (rank,
  // or node index in node mode) and %%; absolute or relative to the working
  // directory. Empty: the agent's per-rank (per-node) log.
  std::string output;
  std::string error;
  bool operator==(const ProcessSpec&) const = default;
};

struct NodeLaunch {
  NodeId node = -1;
  int group_rank = 0;      // GROUP_RANK
  std::vector<int> ranks;  // global ranks here, ascending: local rank i is ranks[i]
  std::vector<int> gpus;   // the node's GPU of each local rank
  bool operator==(const NodeLaunch&) const = default;
};

struct Launch {
  int restart_count = 0;
  int64_t checkpoint_step = -1;  // -1: from scratch
  int world_size = 0;
  NodeId master_node = -1;  // rank 0's node (MASTER_ADDR is its agent's address)
  int master_port = 0;
  std::vector<NodeLaunch> nodes;  // in group-rank order
  // Carried from the job's request, never interpreted by the core. Not in
  // the event log's copy of the command (the request is logged once, at
  // submission): commands read back from the log leave these empty.
  std::vector<std::string> command;
  ProcessSpec process;
  Parallelism parallelism;
  std::string unix_user;
  int64_t memory_mb = 0;  // per node; 0: no limit
  int cpu_millis = 0;     // per node; 0: no limit
  int pids_max = 0;       // per node (JobSpec::pids_max); 0: the node's limit
  // A task of a job array: the array's first job and this task's index
  // (TOPO_ARRAY_JOB_ID, TOPO_ARRAY_TASK_ID); 0 and -1 otherwise.
  int64_t array_job = 0;
  int array_task = -1;
};

// The per-node grouping of a rank map (rank r on ranks[r]).
std::vector<NodeLaunch> GroupByNode(const std::vector<GpuSlot>& ranks);

// The master port range: [first, first + count). Defaults stay below Linux's
// default ephemeral range (32768-60999).
struct PortRange {
  int first = 20000;
  int count = 12000;
};

class MasterPorts {
 public:
  MasterPorts(int node_count, PortRange range);
  // The next port after the last one handed out (on any node) that no job
  // holds on `node`; recorded as held by job. -1 when every port of the
  // range is held there.
  int Take(NodeId node, int64_t job);
  // Frees what job holds on node (nothing when it holds nothing).
  void Release(NodeId node, int64_t job);
  int held(NodeId node) const;

 private:
  // The core's snapshot (core/src/snapshot.cpp) writes and restores the
  // private state.
  friend struct SnapshotAccess;
  PortRange range_;
  int cursor_ = 0;  // offset of the next try, shared by every node
  std::vector<std::map<int, int64_t>> held_by_port_;  // per node: port -> job
};

}  // namespace topo::core
