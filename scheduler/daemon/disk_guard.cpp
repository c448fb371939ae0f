// DiskGuard (disk_guard.hpp).

#include "daemon/disk_guard.hpp"

#include <sys/statvfs.h>

namespace topo::daemon {

core::Status DiskGuard::CheckWrite() {
  if (floor_ <= 0) return core::Status::Ok();
  const auto now = std::chrono::steady_clock::now();
  if (free_ < 0 || now - checked_ >= std::chrono::milliseconds(200)) {
    struct statvfs st {};
    free_ = ::statvfs(dir_.c_str(), &st) == 0
                ? static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize)
                : -1;
    checked_ = now;
  }
  if (free_ < 0 || free_ >= floor_) return core::Status::Ok();
  return core::Status::Error(
      "the scheduler's disk is nearly full (" + std::to_string(free_ >> 20) + " MiB free in " +
          dir_ + ", below min_free_disk_mb = " + std::to_string(floor_ >> 20) +
          "): nothing was changed; reads still work. Free space there, then retry",
      core::ErrorCode::kInsufficientStorage);
}

}  // namespace topo::daemon
