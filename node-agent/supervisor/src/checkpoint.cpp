// Checkpoint protocol on the file system (CHECKPOINTS.md): step-N/ plus
// step-N/COMPLETE, and the crash-safe copy to the persistent tier.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "topo/agent/supervisor.hpp"

namespace topo::agent {
namespace fs = std::filesystem;

namespace {

constexpr const char* kComplete = "COMPLETE";

std::optional<int64_t> ParseStepName(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return std::nullopt;
  int64_t v = 0;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v < 0) return std::nullopt;
  return v;
}

std::string StepName(int64_t step) { return "step-" + std::to_string(step); }

bool FsyncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// fsync every regular file and directory under root (root included).
void FsyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec))
      FsyncPath(it->path(), false);
    else if (it->is_directory(ec))
      FsyncPath(it->path(), true);
  }
  FsyncPath(root, true);
}

}  // namespace

std::vector<int64_t> CompleteSteps(const std::string& dir) {
  std::vector<int64_t> out;
  if (dir.empty()) return out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto step = ParseStepName(it->path().filename().string());
    if (!step) continue;
    std::error_code ec2;
    if (!it->is_directory(ec2)) continue;
    if (fs::is_regular_file(it->path() / kComplete, ec2)) out.push_back(*step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<RestartPoint> NewestRestartStep(const std::string& local_dir,
                                              const std::string& persistent_dir,
                                              bool node_survived) {
  std::optional<RestartPoint> best;
  auto persistent = CompleteSteps(persistent_dir);
  if (!persistent.empty()) {
    best = RestartPoint{persistent.back(), CheckpointTier::kPersistent,
                        (fs::path(persistent_dir) / StepName(persistent.back())).string()};
  }
  if (node_survived) {
    auto local = CompleteSteps(local_dir);
    if (!local.empty() && (!best || local.back() > best->step)) {
      best = RestartPoint{local.back(), CheckpointTier::kLocal,
                          (fs::path(local_dir) / StepName(local.back())).string()};
    }
  }
  return best;
}

core::Status CopyCompleteStep(const std::string& src_dir, const std::string& dst_dir,
                              int64_t step) {
  const fs::path src = fs::path(src_dir) / StepName(step);
  const fs::path dst = fs::path(dst_dir) / StepName(step);
  const fs::path tmp = fs::path(dst_dir) / ("." + StepName(step) + ".tmp");
  std::error_code ec;
  if (!fs::is_regular_file(src / kComplete, ec)) {
    return core::Status::Error("checkpoint " + src.string() + " is not complete (no COMPLETE)");
  }
  if (fs::is_regular_file(dst / kComplete, ec)) return core::Status::Ok();  // already there
  fs::create_directories(dst_dir, ec);
  if (ec) return core::Status::Error("cannot create " + dst_dir + ": " + ec.message());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return core::Status::Error("cannot create " + tmp.string() + ": " + ec.message());
  // 1. Everything but COMPLETE into the temp directory.
  for (auto it = fs::directory_iterator(src, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename() == kComplete) continue;
    std::error_code cec;
    fs::copy(it->path(), tmp / it->path().filename(),
             fs::copy_options::recursive | fs::copy_options::copy_symlinks, cec);
    if (cec) {
      fs::remove_all(tmp, ec);
      return core::Status::Error("copying " + it->path().string() + ": " + cec.message());
    }
  }
  if (ec) {
    std::error_code rec;
    fs::remove_all(tmp, rec);
    return core::Status::Error("reading " + src.string() + ": " + ec.message());
  }
  FsyncTree(tmp);
  // 2. Rename into place (a leftover incomplete step-N from a crash goes first).
  fs::remove_all(dst, ec);
  fs::rename(tmp, dst, ec);
  if (ec) return core::Status::Error("renaming to " + dst.string() + ": " + ec.message());
  FsyncPath(dst_dir, true);
  // 3. COMPLETE last, with the source's content, itself atomically.
  std::string content;
  {
    std::ifstream in(src / kComplete, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    content = ss.str();
  }
  const fs::path ctmp = dst / ".COMPLETE.tmp";
  {
    std::ofstream out(ctmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return core::Status::Error("cannot write " + ctmp.string());
  }
  FsyncPath(ctmp, false);
  fs::rename(ctmp, dst / kComplete, ec);
  if (ec) return core::Status::Error("renaming " + ctmp.string() + ": " + ec.message());
  FsyncPath(dst, true);
  return core::Status::Ok();
}

}  // namespace topo::agent
