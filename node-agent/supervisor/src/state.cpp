// The supervisor's state files (STATE_DIR/jobs/JOB.json) and adoption of a
// running job by a restarted agent.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "supervisor_internal.hpp"

namespace topo::agent {
namespace fs = std::filesystem;

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream ss(line.substr(close + 1));
  ProcStat st;
  ss >> st.state;
  std::string field;
  // Fields 4..21, then 22 = starttime.
  for (int i = 4; i <= 21; ++i) ss >> field;
  ss >> st.start_time;
  if (!ss) return std::nullopt;
  return st;
}

bool SameProcessAlive(pid_t pid, uint64_t start_time) {
  auto st = ReadProcStat(pid);
  return st && st->state != 'Z' && st->state != 'X' && st->start_time == start_time;
}

std::string RankSupervisor::Impl::StatePath(const std::string& job) const {
  return (fs::path(opt.state_dir) / "jobs" / (job + ".json")).string();
}

void RankSupervisor::Impl::SaveState(const JobRec& j) const {
  nlohmann::json doc;
  doc["job_id"] = j.job_id;
  doc["local_checkpoint_dir"] = j.local_dir;
  doc["persistent_checkpoint_dir"] = j.persistent_dir;
  doc["unix_user"] = j.unix_user;
  doc["uid"] = j.owner.uid;
  doc["gid"] = j.owner.gid;
  doc["restart_count"] = j.restart_count;
  doc["launch"] = j.mode == core::LaunchMode::kNode ? "node" : "rank";
  doc["group_rank"] = j.group_rank;
  doc["reported_step"] = j.reported_step;
  doc["persisted_step"] = j.persisted_step;
  doc["finished_reported"] = j.finished_reported;
  if (!j.scratch_pin.empty()) doc["scratch_pin"] = j.scratch_pin;
  if (j.local_removed) doc["local_removed"] = true;
  if (j.cgroup.valid()) {
    doc["cgroup"] = {{"version", j.cgroup.mode == CgroupMode::kV2 ? 2 : 1},
                     {"dirs", j.cgroup.dirs},
                     {"live", j.cgroup_live}};
  }
  doc["ranks"] = nlohmann::json::array();
  for (const auto& r : j.ranks) {
    doc["ranks"].push_back({{"rank", r.rank},
                            {"local_rank", r.local_rank},
                            {"pid", r.pid},
                            {"start_time", r.start_time},
                            {"running", r.running}});
  }
  const std::string path = StatePath(j.job_id);
  const std::string tmp = path + ".tmp";
  const std::string text = doc.dump(1) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
}

void RankSupervisor::Impl::LoadStates() {
  std::error_code ec;
  const fs::path dir = fs::path(opt.state_dir) / "jobs";
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    try {
      std::ifstream in(it->path());
      auto doc = nlohmann::json::parse(in);
      JobRec j;
      j.job_id = doc.at("job_id").get<std::string>();
      if (!ValidJobId(j.job_id) || it->path().stem().string() != j.job_id) continue;
      j.local_dir = doc.value("local_checkpoint_dir", "");
      j.persistent_dir = doc.value("persistent_checkpoint_dir", "");
      j.unix_user = doc.value("unix_user", "");
      j.owner.uid = doc.value("uid", uid_t{0});
      j.owner.gid = doc.value("gid", gid_t{0});
      j.restart_count = doc.value("restart_count", 0);
      j.mode =
          doc.value("launch", "rank") == "node" ? core::LaunchMode::kNode : core::LaunchMode::kRank;
      j.group_rank = doc.value("group_rank", 0);
      j.reported_step = doc.value("reported_step", int64_t{-1});
      j.persisted_step = doc.value("persisted_step", int64_t{-1});
      j.finished_reported = doc.value("finished_reported", false);
      j.scratch_pin = doc.value("scratch_pin", "");
      j.local_removed = doc.value("local_removed", false);
      if (j.scratch_pin != scratch.PinPath(j.job_id)) j.scratch_pin.clear();  // ours only
      auto persisted = CompleteSteps(j.persistent_dir);
      if (!persisted.empty()) j.persisted_step = std::max(j.persisted_step, persisted.back());
      std::vector<pid_t> members;
      if (doc.contains("cgroup")) {
        const auto& c = doc["cgroup"];
        j.cgroup.mode = c.value("version", 2) == 2 ? CgroupMode::kV2 : CgroupMode::kV1;
        j.cgroup.dirs = c.at("dirs").get<std::vector<std::string>>();
        // Live while any of its directories is left (the v1 limit ones too).
        j.cgroup_live =
            std::any_of(j.cgroup.dirs.begin(), j.cgroup.dirs.end(), [](const std::string& d) {
              std::error_code dec;
              return fs::is_directory(d, dec);
            });
        if (j.cgroup_live) members = j.cgroup.Members();
      }
      for (const auto& r : doc.at("ranks")) {
        RankRec rr;
        rr.rank = r.at("rank").get<int>();
        rr.local_rank = r.at("local_rank").get<int>();
        rr.pid = r.at("pid").get<pid_t>();
        rr.start_time = r.at("start_time").get<uint64_t>();
        // Still "running" here; the first Poll() checks /proc (and, for a
        // job with a cgroup, membership: a gone or empty cgroup means its
        // ranks are gone) and reports the ones that ended while no agent
        // watched.
        rr.running = r.at("running").get<bool>();
        rr.adopted = true;
        if (rr.running && j.cgroup.valid() &&
            std::find(members.begin(), members.end(), rr.pid) == members.end()) {
          rr.lost = true;
        }
        j.ranks.push_back(rr);
      }
      jobs[j.job_id] = std::move(j);
    } catch (const std::exception&) {
      continue;  // a corrupt state file adopts nothing
    }
  }
  std::set<std::string> known;
  for (const auto& [id, j] : jobs) known.insert(id);
  cgroups.RemoveStale(known);
  scratch.RemoveStale(known);
}

}  // namespace topo::agent
