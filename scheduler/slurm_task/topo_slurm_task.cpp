// topo-slurm-task: Slurm's TaskProlog for jobs placed by toposched
// (docs/slurm.md, "Ranks in toposched's order").
//
// slurmstepd runs it before each task, the batch script included, and reads
// "export NAME=VALUE" and "print TEXT" lines from its output. It reads the
// job's rank map (common/slurm_rank_map.hpp) from TOPO_SLURM_MAP, else from
// the job's AdminComment (`scontrol show job -o $SLURM_JOB_ID`), and
//   - for the batch script (no SLURM_STEP_ID): writes a hostfile with the
//     node of each rank and a nodefile with the nodes in rank order, and
//     exports SLURM_HOSTFILE, SLURM_DISTRIBUTION=arbitrary, TOPO_NODEFILE,
//     TOPO_SLURM_MAP and the layout's sizes, so that every srun of the script
//     numbers its tasks in toposched's order;
//   - for a task of a step of one task per rank: the rank's TOPO_* variables
//     (as the node agent sets them, docs/jobs.md) and CUDA_VISIBLE_DEVICES =
//     the rank's GPU;
//   - for a task of a step of one task per node (torchrun): TOPO_NODE_RANK and
//     CUDA_VISIBLE_DEVICES = the node's GPUs in rank order.
// The batch script also gets TOPO_RESTART_COUNT, TOPO_CHECKPOINT_SIGNAL when
// the job declared one (--signal), and on a requeued run, from the job's
// TOPO_CHECKPOINT_DIR, TOPO_RESTART_STEP (the newest complete checkpoint).
// A job toposched did not place gets nothing. It never fails the task: what
// goes wrong is said on the task's output ("print") and on stderr.
//
// In an salloc shell, `eval "$(topo-slurm-task)"` does what the batch script
// gets.
//
// As Slurm's TaskEpilog too (SLURM_SCRIPT_CONTEXT=epilog_task), after the
// batch script only: removes the hostfile and nodefile the batch script's
// run wrote, so $TMPDIR does not keep two files per job on every batch
// host. Only regular files of this user named as WriteFile names them for
// this job go; a step's task epilog removes nothing (the script's next srun
// reads them).

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "topo/common/slurm_rank_map.hpp"

namespace {

using topo::common::SlurmRankMap;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::optional<int> EnvInt(const char* name) {
  const std::string v = Env(name);
  if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), ::isdigit)) return std::nullopt;
  return std::stoi(v);
}

void Print(const std::string& text) {
  std::printf("print toposched: %s\n", text.c_str());
  std::fprintf(stderr, "topo-slurm-task: %s\n", text.c_str());
}

void Export(const std::string& name, const std::string& value) {
  std::printf("export %s=%s\n", name.c_str(), value.c_str());
}

// stdout of argv (no shell); nullopt when it could not run or failed.
std::optional<std::string> Capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      if (out.size() < (1u << 22)) out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

// The AdminComment's value in `scontrol show job -o` (it runs to the next
// " Key=" whose key starts with a capital letter).
std::string AdminComment(const std::string& line) {
  const size_t at = line.find(" AdminComment=");
  if (at == std::string::npos) return {};
  size_t end = at + 14;
  for (size_t i = end; i < line.size(); ++i) {
    if (line[i] == ' ' && i + 1 < line.size() &&
        std::isupper(static_cast<unsigned char>(line[i + 1]))) {
      const size_t eq = line.find('=', i + 1);
      const size_t sp = line.find(' ', i + 1);
      if (eq != std::string::npos && (sp == std::string::npos || eq < sp)) {
        end = i;
        break;
      }
    }
    end = i + 1;
  }
  return line.substr(at + 14, end - at - 14);
}

// Where WriteFile writes: $TMPDIR, else /tmp.
std::string FileDir() {
  std::string dir = Env("TMPDIR");
  if (dir.empty() || dir[0] != '/') dir = "/tmp";
  return dir;
}

// Writes lines to a new file under FileDir(), named topo-JOB-WHAT-XXXXXX
// (mkstemp's six letters and digits); its path, or "".
std::string WriteFile(const std::string& job, const char* what,
                      const std::vector<std::string>& lines) {
  std::string path = FileDir() + "/topo-" + job + "-" + what + "-XXXXXX";
  std::vector<char> tmpl(path.begin(), path.end());
  tmpl.push_back('\0');
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return {};
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok ? std::string(tmpl.data()) : std::string();
}

void ExportSizes(const SlurmRankMap& m) {
  const auto& p = m.parallelism;
  Export("TOPO_TP_SIZE", std::to_string(p.tp));
  Export("TOPO_CP_SIZE", std::to_string(p.cp));
  Export("TOPO_EP_SIZE", std::to_string(p.ep));
  Export("TOPO_PP_SIZE", std::to_string(p.pp));
  Export("TOPO_DP_SIZE", std::to_string(p.dp));
}

void ExportRank(const SlurmRankMap& m, int rank) {
  using topo::core::Dim;
  using topo::core::GroupKind;
  topo::core::RankLayout layout(m.parallelism);
  Export("TOPO_TP_RANK", std::to_string(layout.Coord(rank, Dim::kTp)));
  Export("TOPO_CP_RANK", std::to_string(layout.Coord(rank, Dim::kCp)));
  Export("TOPO_PP_RANK", std::to_string(layout.Coord(rank, Dim::kPp)));
  Export("TOPO_EP_RANK", std::to_string(layout.Coord(rank, Dim::kEp)));
  auto dp = layout.GroupMembers(GroupKind::kDp, layout.GroupOf(GroupKind::kDp, rank));
  Export("TOPO_DP_RANK", std::to_string(std::lower_bound(dp.begin(), dp.end(), rank) - dp.begin()));
  for (auto k : topo::core::kAllGroupKinds) {
    std::string name(topo::core::GroupKindName(k));
    std::transform(name.begin(), name.end(), name.begin(), ::toupper);
    Export("TOPO_" + name + "_GROUP", std::to_string(layout.GroupOf(k, rank)));
  }
  Export("CUDA_VISIBLE_DEVICES", std::to_string(m.ranks[rank].gpu));
  Export("CUDA_DEVICE_ORDER", "PCI_BUS_ID");  // the order the scheduler's GPU numbers count in
}

// A requeued run (SLURM_RESTART_COUNT > 0) resumes from the newest complete
// checkpoint in the job's TOPO_CHECKPOINT_DIR (step-N/COMPLETE, the layout
// of docs/jobs.md), which must be on storage every node sees.
// TOPO_CHECKPOINT_SIGNAL is the job's own --signal, from the AdminComment's
// signal= token: the one signal toposched sends it; without one, none.
void ExportRestart(const std::string& comment) {
  const int restarts = EnvInt("SLURM_RESTART_COUNT").value_or(0);
  Export("TOPO_RESTART_COUNT", std::to_string(restarts));
  if (auto sig = topo::common::ParseSlurmCheckpointSignal(comment)) {
    Export("TOPO_CHECKPOINT_SIGNAL", std::to_string(sig->number));
  } else {
    std::printf("unset TOPO_CHECKPOINT_SIGNAL\n");
  }
  const std::string dir = Env("TOPO_CHECKPOINT_DIR");
  if (restarts == 0 || dir.empty()) return;
  long best = -1;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() > 23) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    if (!std::filesystem::exists(it->path() / "COMPLETE", ec)) continue;
    best = std::max(best, std::stol(digits));
  }
  if (best >= 0) Export("TOPO_RESTART_STEP", std::to_string(best));
}

// TaskEpilog of the batch script: removes what its TaskProlog wrote (see the
// top).
void RemoveJobFiles(const std::string& job) {
  const std::string dir = FileDir();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    bool ours = false;
    for (const char* what : {"hosts", "nodes"}) {
      const std::string head = "topo-" + job + "-" + what + "-";
      ours =
          ours || (name.size() == head.size() + 6 && name.rfind(head, 0) == 0 &&
                   std::all_of(name.begin() + static_cast<long>(head.size()), name.end(),
                               [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }));
    }
    struct stat st {};
    const std::string path = dir + "/" + name;
    if (!ours || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    if (::unlink(path.c_str()) != 0) {
      std::fprintf(stderr, "topo-slurm-task: could not remove %s: %s\n", path.c_str(),
                   std::strerror(errno));
    }
  }
}

int Run() {
  const std::string job = Env("SLURM_JOB_ID");
  if (job.empty() || !std::all_of(job.begin(), job.end(), ::isdigit) || job.size() > 12) {
    std::fprintf(stderr,
                 "topo-slurm-task: SLURM_JOB_ID is not set: run it as Slurm's TaskProlog, or in "
                 "an salloc shell as eval \"$(topo-slurm-task)\"\n");
    return 2;
  }
  const bool batch = Env("SLURM_STEP_ID").empty();
  if (Env("SLURM_SCRIPT_CONTEXT") == "epilog_task") {
    if (batch) RemoveJobFiles(job);
    return 0;
  }
  // Exported by the batch script's run with ';' for ' ' (one export line),
  // with TOPO_SLURM_JOB naming the job it belongs to. The batch script reads
  // the AdminComment itself: its environment may come from an enclosing job
  // (an sbatch inside a batch script inherits that job's variables).
  std::string text;
  if (!batch && Env("TOPO_SLURM_JOB") == job) {
    text = Env("TOPO_SLURM_MAP");
    std::replace(text.begin(), text.end(), ';', ' ');
  }
  std::string topo_id;
  auto forget_inherited = [&] {
    if (!batch || Env("TOPO_SLURM_MAP").empty()) return;
    for (const char* name : {"TOPO_SLURM_MAP", "TOPO_SLURM_JOB", "TOPO_NODEFILE", "SLURM_HOSTFILE",
                             "SLURM_DISTRIBUTION"}) {
      std::printf("unset %s\n", name);
    }
  };
  if (text.empty()) {
    const std::string scontrol = Env("TOPO_SCONTROL").empty() ? "scontrol" : Env("TOPO_SCONTROL");
    auto out = Capture({scontrol, "show", "job", "-o", job});
    if (!out) {
      Print("scontrol show job " + job + " failed: tasks keep Slurm's order");
      return 0;
    }
    const std::string comment = AdminComment(*out);
    if (comment.rfind("toposched:", 0) != 0 || comment.find(" map=") == std::string::npos) {
      forget_inherited();  // not placed by toposched (or before rank maps)
      return 0;
    }
    topo_id = comment.substr(10, comment.find(' ') - 10);
    text = comment.substr(comment.find(' ') + 1);
  }
  auto parsed = topo::common::ParseSlurmRankMap(text);
  if (!parsed.ok()) {
    Print("job " + job + ": " + parsed.message() + "; tasks keep Slurm's order");
    return 0;
  }
  const SlurmRankMap& m = parsed.value();
  const int world = static_cast<int>(m.ranks.size());
  const int nodes = static_cast<int>(m.nodes.size());
  const std::string here = Env("SLURMD_NODENAME");

  if (batch) {
    // The batch script (or an salloc shell): lay out every srun it runs.
    std::vector<std::string> hosts;
    for (int r = 0; r < world; ++r) hosts.push_back(m.NodeOf(r));
    const std::string hostfile = WriteFile(job, "hosts", hosts);
    const std::string nodefile = WriteFile(job, "nodes", m.nodes);
    if (hostfile.empty() || nodefile.empty()) {
      Print("could not write the hostfile under $TMPDIR or /tmp: tasks keep Slurm's order");
    } else {
      Export("SLURM_HOSTFILE", hostfile);
      Export("SLURM_DISTRIBUTION", "arbitrary");
      Export("TOPO_NODEFILE", nodefile);
    }
    std::string compact = text;
    std::replace(compact.begin(), compact.end(), ' ', ';');
    Export("TOPO_SLURM_MAP", compact);
    Export("TOPO_SLURM_JOB", job);
    if (!topo_id.empty()) Export("TOPO_JOB_ID", topo_id);
    ExportRestart(text);
    Export("TOPO_WORLD_SIZE", std::to_string(world));
    ExportSizes(m);
    return 0;
  }

  const auto procid = EnvInt("SLURM_PROCID");
  const auto ntasks = EnvInt("SLURM_STEP_NUM_TASKS");
  if (!procid || !ntasks) return 0;
  ExportSizes(m);
  if (*ntasks == world && *procid < world) {
    if (m.NodeOf(*procid) != here) {
      Print("rank " + std::to_string(*procid) + " runs on " + here +
            " but toposched placed it on " + m.NodeOf(*procid) +
            ": run srun with SLURM_HOSTFILE and --distribution=arbitrary " +
            "(the batch script has them)");
      return 0;
    }
    ExportRank(m, *procid);
  } else if (*ntasks == nodes && *procid < nodes) {
    if (m.nodes[*procid] != here) {
      Print("node task " + std::to_string(*procid) + " runs on " + here + " but toposched's node " +
            std::to_string(*procid) + " is " + m.nodes[*procid] +
            ": run srun with SLURM_HOSTFILE=$TOPO_NODEFILE");
      return 0;
    }
    std::string gpus;
    for (const auto& r : m.ranks) {
      if (r.node == *procid) gpus += (gpus.empty() ? "" : ",") + std::to_string(r.gpu);
    }
    Export("TOPO_NODE_RANK", std::to_string(*procid));
    Export("CUDA_VISIBLE_DEVICES", gpus);
    Export("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fprintf(
        help ? stdout : stderr,
        "usage: topo-slurm-task\n"
        "Slurm's TaskProlog for jobs placed by toposched (TaskProlog=/path/to/"
        "topo-slurm-task in slurm.conf); in an salloc shell: eval \"$(topo-slurm-task)\".\n"
        "As TaskEpilog (the same path) it removes the hostfile and nodefile the batch "
        "script's run wrote.\n"
        "It takes no arguments; docs/slurm.md describes what it exports.\n");
    return help ? 0 : 2;
  }
  return Run();
}
