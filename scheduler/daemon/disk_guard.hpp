#pragma once
// The storage floor (docs/daemon.md): below `min_free_disk_mb` free on the
// state directory's filesystem, requests that write are refused with 507 and
// the reason while reads go on; agents' reports still commit (the floor is
// their headroom), so nothing acknowledged is lost and the daemon keeps
// serving.
//
// Thread safety: one owner (the strand).

#include <chrono>
#include <cstdint>
#include <string>

#include "topo/core/status.hpp"

namespace topo::daemon {

class DiskGuard {
 public:
  DiskGuard(std::string dir, int64_t floor_bytes) : dir_(std::move(dir)), floor_(floor_bytes) {}
  // Ok while at least the floor is free; kInsufficientStorage with the
  // numbers and the fix otherwise. Asks the filesystem at most every 200 ms.
  core::Status CheckWrite();
  // Free bytes when last asked (-1: not yet, or the filesystem did not say).
  int64_t free_bytes() const { return free_; }

 private:
  std::string dir_;
  int64_t floor_;
  int64_t free_ = -1;
  std::chrono::steady_clock::time_point checked_{};
};

}  // namespace topo::daemon
