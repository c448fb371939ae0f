// ReadPool (read_pool.hpp).

#include "daemon/loop/read_pool.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::Result;
using core::Status;

ReadPool::Lease::~Lease() {
  if (pool_ != nullptr && store_ != nullptr) pool_->Return(std::move(store_));
}

Result<ReadPool::Lease> ReadPool::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !idle_.empty() || open_ < size_; });
  if (!idle_.empty()) {
    std::unique_ptr<store::Store> store = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(store));
  }
  ++open_;
  lock.unlock();
  store::OpenOptions options;
  options.read_only = true;
  Result<store::Store> opened = store::Store::Open(path_, options);
  if (!opened.ok()) {
    std::lock_guard relock(mu_);
    --open_;
    cv_.notify_one();
    return Status::Error(opened.message(), ErrorCode::kUnavailable);
  }
  return Lease(this, std::make_unique<store::Store>(std::move(opened).value()));
}

void ReadPool::Return(std::unique_ptr<store::Store> store) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(store));
  cv_.notify_one();
}

}  // namespace topo::daemon
