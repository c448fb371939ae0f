// A fake libnvidia-ml for the tests: the NVML C symbols NvmlBackend uses,
// with canned answers (two GPUs, "Fake H100"), plus fake_nvml_* controls a
// test reaches with dlsym to make an XID happen, a GPU get lost, and so on.
// Loaded through dlopen exactly as the real library would be.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>

#include "gpu/nvml_abi.hpp"

namespace abi = topo::agent::gpu::nvml_abi;

struct topo::agent::gpu::nvml_abi::DeviceOpaque {
  unsigned index;
};
struct topo::agent::gpu::nvml_abi::EventSetOpaque {
  int unused;
};

namespace {
constexpr unsigned kMaxGpus = 8;
struct FakeGpu {
  bool lost = false;
  bool thermal = false;
  unsigned long long ecc[2] = {0, 0};
};
struct State {
  std::mutex mu;
  std::condition_variable cv;
  abi::DeviceOpaque devices[kMaxGpus] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
  abi::EventSetOpaque set{0};
  unsigned gpus = 2;
  abi::Return init_result = abi::kSuccess;
  int inits = 0;
  int shutdowns = 0;
  FakeGpu gpu[kMaxGpus];
  std::deque<abi::EventData> events;
  bool lost_event = false;  // the next wait answers GPU_IS_LOST
} g;

abi::Return Check(abi::Device d) {
  if (d == nullptr || d->index >= g.gpus) return abi::kErrorInvalidArgument;
  return g.gpu[d->index].lost ? abi::kErrorGpuIsLost : abi::kSuccess;
}
}  // namespace

extern "C" {

// ---- controls
__attribute__((visibility("default"))) void fake_nvml_reset(unsigned gpus) {
  std::lock_guard lock(g.mu);
  g.gpus = gpus > kMaxGpus ? kMaxGpus : gpus;
  g.init_result = abi::kSuccess;
  for (FakeGpu& f : g.gpu) f = FakeGpu{};
  g.events.clear();
  g.lost_event = false;
}
__attribute__((visibility("default"))) void fake_nvml_set_init_result(int r) {
  std::lock_guard lock(g.mu);
  g.init_result = r;
}
__attribute__((visibility("default"))) int fake_nvml_live_inits() {
  std::lock_guard lock(g.mu);
  return g.inits - g.shutdowns;
}
__attribute__((visibility("default"))) void fake_nvml_inject_xid(unsigned i,
                                                                 unsigned long long xid) {
  std::lock_guard lock(g.mu);
  g.events.push_back(abi::EventData{&g.devices[i], abi::kEventTypeXidCriticalError, xid, 0, 0});
  g.cv.notify_all();
}
__attribute__((visibility("default"))) void fake_nvml_set_lost(unsigned i) {
  std::lock_guard lock(g.mu);
  g.gpu[i].lost = true;
  g.lost_event = true;
  g.cv.notify_all();
}
__attribute__((visibility("default"))) void fake_nvml_set_thermal(unsigned i, int on) {
  std::lock_guard lock(g.mu);
  g.gpu[i].thermal = on != 0;
}
__attribute__((visibility("default"))) void fake_nvml_add_ecc(unsigned i,
                                                              unsigned long long corrected,
                                                              unsigned long long uncorrected) {
  std::lock_guard lock(g.mu);
  g.gpu[i].ecc[0] += corrected;
  g.gpu[i].ecc[1] += uncorrected;
}

// ---- NVML
__attribute__((visibility("default"))) abi::Return nvmlInit_v2() {
  std::lock_guard lock(g.mu);
  if (g.init_result == abi::kSuccess) ++g.inits;
  return g.init_result;
}
__attribute__((visibility("default"))) abi::Return nvmlShutdown() {
  std::lock_guard lock(g.mu);
  ++g.shutdowns;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) const char* nvmlErrorString(abi::Return r) {
  switch (r) {
    case abi::kErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case abi::kErrorGpuIsLost:
      return "GPU is lost";
    default:
      return "fake error";
  }
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetCount_v2(unsigned* n) {
  std::lock_guard lock(g.mu);
  *n = g.gpus;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetHandleByIndex_v2(unsigned i,
                                                                                 abi::Device* d) {
  std::lock_guard lock(g.mu);
  if (i >= g.gpus) return abi::kErrorInvalidArgument;
  *d = &g.devices[i];
  return g.gpu[i].lost ? abi::kErrorGpuIsLost : abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetName(abi::Device d, char* buf,
                                                                     unsigned len) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  std::snprintf(buf, len, "Fake H100 80GB");
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetUUID(abi::Device d, char* buf,
                                                                     unsigned len) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  std::snprintf(buf, len, "GPU-fake-%04u", d->index);
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetMemoryInfo(abi::Device d,
                                                                           abi::Memory* m) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  m->total = 80ULL << 30;
  m->used = 0;
  m->free = m->total;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetTemperature(abi::Device d, int,
                                                                            unsigned* t) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  *t = g.gpu[d->index].thermal ? 91 : 45;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetCurrentClocksThrottleReasons(
    abi::Device d, unsigned long long* reasons) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  *reasons = g.gpu[d->index].thermal ? abi::kThrottleHwThermal : 0;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceGetTotalEccErrors(
    abi::Device d, int type, int counter, unsigned long long* n) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  if (counter != abi::kVolatileEcc || type < 0 || type > 1) return abi::kErrorInvalidArgument;
  *n = g.gpu[d->index].ecc[type];
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlEventSetCreate(abi::EventSet* s) {
  *s = &g.set;
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlDeviceRegisterEvents(
    abi::Device d, unsigned long long types, abi::EventSet) {
  std::lock_guard lock(g.mu);
  if (abi::Return r = Check(d); r != abi::kSuccess) return r;
  return (types & abi::kEventTypeXidCriticalError) ? abi::kSuccess : abi::kErrorNotSupported;
}
__attribute__((visibility("default"))) abi::Return nvmlEventSetWait_v2(abi::EventSet,
                                                                       abi::EventData* out,
                                                                       unsigned timeout_ms) {
  std::unique_lock lock(g.mu);
  g.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                [] { return !g.events.empty() || g.lost_event; });
  if (g.lost_event) {
    g.lost_event = false;
    return abi::kErrorGpuIsLost;
  }
  if (g.events.empty()) return abi::kErrorTimeout;
  *out = g.events.front();
  g.events.pop_front();
  return abi::kSuccess;
}
__attribute__((visibility("default"))) abi::Return nvmlEventSetFree(abi::EventSet) {
  return abi::kSuccess;
}

}  // extern "C"
