// SimGpus (sim_gpus.hpp).

#include "sim_gpus.hpp"

namespace topo::agent {

namespace {
// Per-GPU state bits.
constexpr uint8_t kFaulty = 1;   // an XID, ECC error or loss since the last clear
constexpr uint8_t kThermal = 2;  // throttling now
constexpr uint8_t kLost = 4;     // off the bus
}  // namespace

SimGpus::SimGpus(const std::string& node, int gpus, const std::string& model)
    : faulty_(static_cast<size_t>(gpus), 0) {
  inventory_.gpus.reserve(static_cast<size_t>(gpus));
  for (int i = 0; i < gpus; ++i) {
    inventory_.gpus.push_back(
        gpu::GpuInfo{i, model, "GPU-sim-" + node + "-" + std::to_string(i), 81559ULL << 20});
  }
}

std::vector<gpu::HealthEvent> SimGpus::Poll(core::TimeMs now) {
  std::vector<gpu::HealthEvent> out;
  out.swap(pending_);
  for (gpu::HealthEvent& e : out) e.at = now;
  return out;
}

void SimGpus::Reset() {
  pending_.clear();
  std::fill(faulty_.begin(), faulty_.end(), 0);
}

core::Status SimGpus::Inject(const gpu::InjectCommand& c) {
  if (c.gpu < 0 || c.gpu >= inventory_.count()) {
    return core::Status::Error("GPU " + std::to_string(c.gpu) +
                               " out of range (this node has GPUs 0-" +
                               std::to_string(inventory_.count() - 1) + ")");
  }
  uint8_t& s = faulty_[static_cast<size_t>(c.gpu)];
  auto push = [&](gpu::HealthEventKind kind, int64_t code, bool on, const char* detail) {
    pending_.push_back(gpu::HealthEvent{c.gpu, kind, code, on, 0, detail});
  };
  using K = gpu::HealthEventKind;
  switch (c.kind) {
    case K::kXid:
      s |= kFaulty;
      push(K::kXid, c.a, true, "injected (simulated node)");
      break;
    case K::kEccSingleBit:
    case K::kEccDoubleBit:
      if (c.a > 0) push(K::kEccSingleBit, c.a, true, "injected (simulated node)");
      if (c.b > 0) push(K::kEccDoubleBit, c.b, true, "injected (simulated node)");
      if (c.a > 0 || c.b > 0) s |= kFaulty;
      break;
    case K::kThermal: {
      const bool on = c.a != 0;
      if (((s & kThermal) != 0) == on) break;
      s = static_cast<uint8_t>(on ? (s | kThermal) : (s & ~kThermal));
      push(K::kThermal, 0, on, "injected (simulated node)");
      if (!on && (s & (kFaulty | kLost)) == 0) {
        push(K::kCleared, 0, true, "thermal throttling ended");
      }
      break;
    }
    case K::kOffBus:
      if (s & kLost) break;
      s |= kLost | kFaulty;
      push(K::kOffBus, 0, true, "injected (simulated node)");
      break;
    case K::kCleared:
      s = 0;
      push(K::kCleared, 0, true, "cleared (simulated node)");
      break;
  }
  return core::Status::Ok();
}

}  // namespace topo::agent
