#pragma once
// Reads served off the scheduling strand (docs/daemon.md, "What happens to a
// request"): the event log, the audit log and whoami run on the I/O thread
// that read the request, each with a read-only SQLite connection (WAL lets
// readers run beside the writer) from a small pool, with indexed pagination
// and a cap per request, so no scan delays a submission or a heartbeat.
//
// Thread safety: ReadPool is; the handlers use only what they are given.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "daemon/api/scope.hpp"
#include "store/store.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

class ReadPool {
 public:
  // At most `size` connections to the store at db_path, opened on first use.
  ReadPool(std::string db_path, size_t size) : path_(std::move(db_path)), size_(size) {}

  // A connection held for one request; back to the pool when destroyed.
  class Lease {
   public:
    Lease(ReadPool* pool, std::unique_ptr<store::Store> store)
        : pool_(pool), store_(std::move(store)) {}
    Lease(Lease&&) = default;
    ~Lease();
    store::Store& store() { return *store_; }

   private:
    ReadPool* pool_;
    std::unique_ptr<store::Store> store_;
  };
  // Waits while every connection is leased. kUnavailable when the store
  // cannot be opened for reading.
  core::Result<Lease> Acquire();

 private:
  void Return(std::unique_ptr<store::Store> store);
  const std::string path_;
  const size_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<store::Store>> idle_;
  size_t open_ = 0;
};

}  // namespace topo::daemon
