// Launch validation and the rank environment (supervisor.hpp,
// RankBaseEnvironment and RankEnvironment).

#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "supervisor_internal.hpp"
#include "topo/common/job_process.hpp"

namespace topo::agent {

namespace {

int RankIndexInGroup(const core::RankLayout& layout, core::GroupKind k, int rank) {
  auto members = layout.GroupMembers(k, layout.GroupOf(k, rank));
  auto it = std::lower_bound(members.begin(), members.end(), rank);
  return static_cast<int>(it - members.begin());
}

}  // namespace

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string ResolveExecutable(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return name;
  std::istringstream ss(path_env);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  return name;  // execve fails with ENOENT; the log says so
}

std::vector<int> JobGpus(const JobLaunch& l) {
  std::vector<const LocalRankSpec*> by_local;
  for (const auto& r : l.ranks) by_local.push_back(&r);
  std::sort(by_local.begin(), by_local.end(), [](const LocalRankSpec* a, const LocalRankSpec* b) {
    return a->local_rank < b->local_rank;
  });
  std::vector<int> gpus;
  for (const auto* r : by_local) gpus.insert(gpus.end(), r->gpus.begin(), r->gpus.end());
  return gpus;
}

core::Status ValidateLaunch(const JobLaunch& l) {
  if (!ValidJobId(l.job_id)) {
    return core::Status::Error(
        "job id '" + l.job_id +
        "' is not valid: use 1-128 of [A-Za-z0-9._-], not starting with '.'");
  }
  const std::string job = "job " + l.job_id + ": ";
  if (l.argv.empty() || l.argv[0].empty()) {
    return core::Status::Error(job + "argv is empty: give the rank's command");
  }
  if (l.ranks.empty()) return core::Status::Error(job + "no local ranks to start");
  const auto& p = l.parallelism;
  core::JobSpec spec;
  spec.gpus = p.tp * p.cp * p.pp * p.dp;
  spec.parallelism = p;
  if (auto st = core::ValidateJobSpec(spec); !st.ok()) {
    return core::Status::Error(job + st.message());
  }
  std::set<int> ranks, locals, gpus;
  size_t with_gpu = 0;
  for (const auto& r : l.ranks) {
    if (r.rank < 0 || r.rank >= spec.gpus) {
      return core::Status::Error(job + "rank " + std::to_string(r.rank) +
                                 " is outside the world of " + std::to_string(spec.gpus));
    }
    if (!ranks.insert(r.rank).second || !locals.insert(r.local_rank).second) {
      return core::Status::Error(job + "rank " + std::to_string(r.rank) + " or local rank " +
                                 std::to_string(r.local_rank) + " appears twice");
    }
    if (r.local_rank < 0 || r.local_rank >= static_cast<int>(l.ranks.size())) {
      return core::Status::Error(job + "local rank " + std::to_string(r.local_rank) +
                                 " is outside 0.." + std::to_string(l.ranks.size() - 1) +
                                 ": number the node's ranks 0..LOCAL_WORLD_SIZE-1");
    }
    if (r.gpus.size() > 1) {
      return core::Status::Error(job + "rank " + std::to_string(r.rank) + " lists " +
                                 std::to_string(r.gpus.size()) +
                                 " GPUs: a rank drives one GPU (LOCAL_RANK indexes "
                                 "CUDA_VISIBLE_DEVICES); start one rank per GPU");
    }
    for (int g : r.gpus) {
      if (g < 0 || !gpus.insert(g).second) {
        return core::Status::Error(job + "GPU " + std::to_string(g) +
                                   " is negative or given to two ranks");
      }
      ++with_gpu;
    }
  }
  if (with_gpu != 0 && with_gpu != l.ranks.size()) {
    return core::Status::Error(job + "only " + std::to_string(with_gpu) + " of " +
                               std::to_string(l.ranks.size()) +
                               " ranks have a GPU: give every rank one, or none");
  }
  if (l.master_port <= 0 || l.master_port > 65535) {
    return core::Status::Error(job + "master_port must be in 1-65535");
  }
  if (auto st = common::CheckJobEnv(l.env); !st.ok()) {
    return core::Status::Error(job + st.message());
  }
  if (!l.working_dir.empty()) {
    if (auto st = common::CheckWorkingDir(l.working_dir); !st.ok()) {
      return core::Status::Error(job + st.message());
    }
  }
  for (const auto* pattern : {&l.output, &l.error}) {
    if (pattern->empty()) continue;
    if (auto st = common::CheckOutputPattern(*pattern); !st.ok()) {
      return core::Status::Error(job + (pattern == &l.output ? "output: " : "error: ") +
                                 st.message());
    }
  }
  if (l.limits.memory_bytes < 0 || l.limits.cpus < 0) {
    return core::Status::Error(job + "limits must not be negative (0: no limit)");
  }
  return core::Status::Ok();
}

std::map<std::string, std::string> RankBaseEnvironment(const UnixAccount& account) {
  return {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
          {"HOME", account.home},
          {"USER", account.name},
          {"LOGNAME", account.name},
          {"SHELL", account.shell.empty() ? "/bin/sh" : account.shell}};
}

std::map<std::string, std::string> RankEnvironment(const JobLaunch& launch, const LocalRankSpec& r,
                                                   const std::string& ckpt_dir) {
  core::RankLayout layout(launch.parallelism);
  std::map<std::string, std::string> env;
  const auto& p = launch.parallelism;
  const std::string world = std::to_string(layout.world_size());
  env["MASTER_ADDR"] = launch.master_addr;
  env["MASTER_PORT"] = std::to_string(launch.master_port);
  env["RANK"] = std::to_string(r.rank);
  env["WORLD_SIZE"] = world;
  env["ROLE_RANK"] = std::to_string(r.rank);
  env["ROLE_WORLD_SIZE"] = world;
  env["ROLE_NAME"] = "default";
  env["LOCAL_RANK"] = std::to_string(r.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(launch.ranks.size());
  env["GROUP_RANK"] = std::to_string(launch.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(launch.group_world_size);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(launch.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(launch.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = "topo-" + launch.job_id;
  auto omp = launch.env.find("OMP_NUM_THREADS");
  env["OMP_NUM_THREADS"] =
      omp != launch.env.end() ? omp->second : std::to_string(std::max(1, launch.omp_num_threads));
  const auto gpus = JobGpus(launch);
  if (!gpus.empty()) {
    std::string v;
    for (size_t i = 0; i < gpus.size(); ++i) v += (i ? "," : "") + std::to_string(gpus[i]);
    env["CUDA_VISIBLE_DEVICES"] = v;
    // The numbers above are NVML's (the agent's inventory), which count in
    // PCI bus order; CUDA's own default order puts the fastest GPU first.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }
  env["TOPO_JOB_ID"] = launch.job_id;
  using core::Dim;
  using core::GroupKind;
  env["TOPO_TP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kTp));
  env["TOPO_CP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kCp));
  env["TOPO_PP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kPp));
  env["TOPO_EP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kEp));
  env["TOPO_DP_RANK"] = std::to_string(RankIndexInGroup(layout, GroupKind::kDp, r.rank));
  env["TOPO_TP_SIZE"] = std::to_string(p.tp);
  env["TOPO_CP_SIZE"] = std::to_string(p.cp);
  env["TOPO_PP_SIZE"] = std::to_string(p.pp);
  env["TOPO_EP_SIZE"] = std::to_string(p.ep);
  env["TOPO_DP_SIZE"] = std::to_string(p.dp);
  for (auto k : core::kAllGroupKinds) {
    std::string name(core::GroupKindName(k));
    std::transform(name.begin(), name.end(), name.begin(), ::toupper);
    env["TOPO_" + name + "_GROUP"] = std::to_string(layout.GroupOf(k, r.rank));
  }
  env["TOPO_RESTART_COUNT"] = std::to_string(launch.restart_count);
  env["TOPO_CHECKPOINT_DIR"] = ckpt_dir;
  if (launch.restart_step) env["TOPO_RESTART_STEP"] = std::to_string(*launch.restart_step);
  if (launch.array_job) {
    env["TOPO_ARRAY_JOB_ID"] = std::to_string(*launch.array_job);
    env["TOPO_ARRAY_TASK_ID"] = std::to_string(launch.array_task);
  }
  return env;
}

std::map<std::string, std::string> NodeEnvironment(const JobLaunch& launch,
                                                   const std::string& ckpt_dir) {
  core::RankLayout layout(launch.parallelism);
  const auto& p = launch.parallelism;
  std::map<std::string, std::string> env;
  env["MASTER_ADDR"] = launch.master_addr;
  env["MASTER_PORT"] = std::to_string(launch.master_port);
  env["WORLD_SIZE"] = std::to_string(layout.world_size());
  env["LOCAL_WORLD_SIZE"] = std::to_string(launch.ranks.size());
  env["GROUP_RANK"] = std::to_string(launch.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(launch.group_world_size);
  auto omp = launch.env.find("OMP_NUM_THREADS");
  env["OMP_NUM_THREADS"] =
      omp != launch.env.end() ? omp->second : std::to_string(std::max(1, launch.omp_num_threads));
  const auto gpus = JobGpus(launch);
  if (!gpus.empty()) {
    std::string v;
    for (size_t i = 0; i < gpus.size(); ++i) v += (i ? "," : "") + std::to_string(gpus[i]);
    env["CUDA_VISIBLE_DEVICES"] = v;
    // The numbers above are NVML's (the agent's inventory), which count in
    // PCI bus order; CUDA's own default order puts the fastest GPU first.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }
  std::vector<const LocalRankSpec*> by_local;
  for (const auto& r : launch.ranks) by_local.push_back(&r);
  std::sort(by_local.begin(), by_local.end(), [](const LocalRankSpec* a, const LocalRankSpec* b) {
    return a->local_rank < b->local_rank;
  });
  std::string ranks;
  for (const auto* r : by_local) ranks += (ranks.empty() ? "" : ",") + std::to_string(r->rank);
  env["TOPO_NODE_RANKS"] = ranks;
  env["TOPO_JOB_ID"] = launch.job_id;
  env["TOPO_RESTART_COUNT"] = std::to_string(launch.restart_count);
  env["TOPO_TP_SIZE"] = std::to_string(p.tp);
  env["TOPO_CP_SIZE"] = std::to_string(p.cp);
  env["TOPO_PP_SIZE"] = std::to_string(p.pp);
  env["TOPO_EP_SIZE"] = std::to_string(p.ep);
  env["TOPO_DP_SIZE"] = std::to_string(p.dp);
  env["TOPO_CHECKPOINT_DIR"] = ckpt_dir;
  if (launch.restart_step) env["TOPO_RESTART_STEP"] = std::to_string(*launch.restart_step);
  if (launch.array_job) {
    env["TOPO_ARRAY_JOB_ID"] = std::to_string(*launch.array_job);
    env["TOPO_ARRAY_TASK_ID"] = std::to_string(launch.array_task);
  }
  return env;
}

}  // namespace topo::agent
