// NvmlBackend: NVML through dlopen.
//
// Inventory is read once at start. A waiter thread blocks in
// nvmlEventSetWait_v2 (500 ms at a time, so it can stop) for XID and
// double-bit ECC events; each one is queued and a byte is written to a pipe
// whose read end is WaitFd(). Poll(now) drains the pipe, turns queued XIDs
// into events, and reads every GPU's thermal throttle reasons and volatile
// ECC totals (events for changes since the last Poll). Any call answering
// NVML_ERROR_GPU_IS_LOST marks that GPU off the bus, reported once; the
// waiter also wakes Poll when nvmlEventSetWait_v2 says a GPU is lost.

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "gpu/gpu_backend.hpp"
#include "gpu/nvml_abi.hpp"

namespace topo::agent::gpu {

namespace {

namespace abi = nvml_abi;

struct NvmlApi {
  abi::InitV2Fn init = nullptr;
  abi::ShutdownFn shutdown = nullptr;
  abi::ErrorStringFn error_string = nullptr;  // optional
  abi::DeviceGetCountV2Fn get_count = nullptr;
  abi::DeviceGetHandleByIndexV2Fn get_handle = nullptr;
  abi::DeviceGetNameFn get_name = nullptr;
  abi::DeviceGetUuidFn get_uuid = nullptr;
  abi::DeviceGetMemoryInfoFn get_memory = nullptr;
  abi::DeviceGetTemperatureFn get_temperature = nullptr;
  abi::DeviceGetThrottleReasonsFn get_throttle = nullptr;
  abi::DeviceGetTotalEccErrorsFn get_ecc = nullptr;
  abi::EventSetCreateFn event_set_create = nullptr;
  abi::DeviceRegisterEventsFn register_events = nullptr;
  abi::EventSetWaitV2Fn event_set_wait = nullptr;
  abi::EventSetFreeFn event_set_free = nullptr;  // optional

  std::string Error(abi::Return r) const {
    std::string s = "NVML error " + std::to_string(r);
    if (error_string != nullptr) {
      const char* m = error_string(r);
      if (m != nullptr) s += std::string(" (") + m + ")";
    }
    return s;
  }
};

template <typename Fn>
bool Bind(void* lib, const char* name, Fn& out, std::string& missing) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  // POSIX guarantees object and function pointers convert through dlsym.
  out = reinterpret_cast<Fn>(p);
  return true;
}

class NvmlBackend : public GpuBackend {
 public:
  NvmlBackend(void* lib, NvmlApi api) : lib_(lib), api_(api) {}

  ~NvmlBackend() override {
    if (waiter_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      stop_cv_.notify_all();
      waiter_.join();
    }
    if (event_set_ != nullptr && api_.event_set_free != nullptr) api_.event_set_free(event_set_);
    if (initialized_) api_.shutdown();
    if (pipe_[0] >= 0) close(pipe_[0]);
    if (pipe_[1] >= 0) close(pipe_[1]);
    if (lib_ != nullptr) dlclose(lib_);
  }

  core::Status Start() {
    if (abi::Return r = api_.init(); r != abi::kSuccess) {
      return core::Status::Error("nvmlInit_v2 failed: " + api_.Error(r));
    }
    initialized_ = true;
    unsigned int count = 0;
    if (abi::Return r = api_.get_count(&count); r != abi::kSuccess) {
      return core::Status::Error("nvmlDeviceGetCount_v2 failed: " + api_.Error(r));
    }
    if (count == 0) return core::Status::Error("NVML sees no GPU");
    if (count > 64)
      return core::Status::Error("NVML sees " + std::to_string(count) +
                                 " GPUs; a node has at most 64");
    gpus_.resize(count);
    for (unsigned int i = 0; i < count; ++i) {
      Gpu& g = gpus_[i];
      GpuInfo info;
      info.index = static_cast<int>(i);
      abi::Return r = api_.get_handle(i, &g.handle);
      if (r == abi::kErrorGpuIsLost) {
        g.lost_pending = true;
      } else if (r != abi::kSuccess) {
        return core::Status::Error("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) +
                                   ") failed: " + api_.Error(r));
      } else {
        char buf[abi::kBufferSize] = {};
        r = api_.get_name(g.handle, buf, sizeof buf);
        info.name = r == abi::kSuccess ? std::string(buf) : "unknown";
        Note(i, r);
        std::memset(buf, 0, sizeof buf);
        r = api_.get_uuid(g.handle, buf, sizeof buf);
        info.uuid = r == abi::kSuccess ? std::string(buf) : "";
        Note(i, r);
        abi::Memory mem{};
        r = api_.get_memory(g.handle, &mem);
        if (r == abi::kSuccess) info.memory_total = mem.total;
        Note(i, r);
        ReadEcc(i, /*report=*/false, 0, nullptr);
        g.thermal = ReadThermal(i).value_or(false);
      }
      inventory_.gpus.push_back(std::move(info));
    }
    if (pipe(pipe_) != 0) return core::Status::Error(std::string("pipe: ") + strerror(errno));
    for (int fd : pipe_) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    // Events: without them XIDs are not seen, so say so, but run.
    if (api_.event_set_create(&event_set_) == abi::kSuccess) {
      bool any = false;
      for (Gpu& g : gpus_) {
        if (g.handle == nullptr) continue;
        abi::Return r = api_.register_events(
            g.handle, abi::kEventTypeXidCriticalError | abi::kEventTypeDoubleBitEccError,
            event_set_);
        if (r == abi::kErrorNotSupported) {
          r = api_.register_events(g.handle, abi::kEventTypeXidCriticalError, event_set_);
        }
        any = any || r == abi::kSuccess;
      }
      if (any) waiter_ = std::thread([this] { WaitLoop(); });
    } else {
      event_set_ = nullptr;
    }
    return core::Status::Ok();
  }

  std::string_view Name() const override { return "nvml"; }
  const GpuInventory& Inventory() const override { return inventory_; }
  int WaitFd() const override { return pipe_[0]; }

  std::vector<HealthEvent> Poll(core::TimeMs now) override {
    char buf[256];
    while (read(pipe_[0], buf, sizeof buf) > 0) {
    }
    std::deque<abi::EventData> events;
    {
      std::lock_guard lock(mu_);
      events.swap(queue_);
    }
    std::vector<HealthEvent> out;
    auto push = [&](int gpu, HealthEventKind kind, int64_t code, bool on, std::string detail) {
      HealthEvent e;
      e.gpu = gpu;
      e.kind = kind;
      e.code = code;
      e.on = on;
      e.at = now;
      e.detail = std::move(detail);
      out.push_back(std::move(e));
    };
    for (const abi::EventData& d : events) {
      const int i = IndexOf(d.device);
      if (i < 0) continue;
      if (d.event_type & abi::kEventTypeXidCriticalError) {
        gpus_[i].faulty = true;
        push(i, HealthEventKind::kXid, static_cast<int64_t>(d.event_data), true,
             "nvmlEventTypeXidCriticalError");
      }
      // Double-bit ECC events: the counters read below report them.
    }
    for (size_t u = 0; u < gpus_.size(); ++u) {
      const int i = static_cast<int>(u);
      Gpu& g = gpus_[u];
      if (!g.lost && !g.lost_pending) {
        ReadEcc(i, /*report=*/true, now, &out);
        if (!g.lost_pending) {
          std::optional<bool> thermal = ReadThermal(i);
          if (thermal && *thermal != g.thermal) {
            g.thermal = *thermal;
            std::string detail = "clocks throttle reasons";
            unsigned int temp = 0;
            abi::Return r = api_.get_temperature(g.handle, abi::kTemperatureGpu, &temp);
            Note(i, r);
            if (r == abi::kSuccess) detail += ", " + std::to_string(temp) + " C";
            push(i, HealthEventKind::kThermal, 0, g.thermal, detail);
            if (!g.thermal && !g.faulty && !g.lost_pending) {
              push(i, HealthEventKind::kCleared, 0, true, "thermal throttling ended");
            }
          }
        }
      }
      if (g.lost_pending) {
        g.lost_pending = false;
        g.lost = true;
        g.faulty = true;
        push(i, HealthEventKind::kOffBus, 0, true, "NVML_ERROR_GPU_IS_LOST");
      }
    }
    return out;
  }

 private:
  struct Gpu {
    abi::Device handle = nullptr;
    bool thermal = false;
    bool faulty = false;        // an XID or ECC error seen
    bool lost_pending = false;  // found lost, not yet reported
    bool lost = false;          // reported lost; no longer read
    unsigned long long ecc[2] = {0, 0};
    bool ecc_known[2] = {false, false};
  };

  int IndexOf(abi::Device d) const {
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (gpus_[i].handle == d) return static_cast<int>(i);
    }
    return -1;
  }

  void Note(int i, abi::Return r) {
    if (r == abi::kErrorGpuIsLost && !gpus_[i].lost) gpus_[i].lost_pending = true;
  }

  std::optional<bool> ReadThermal(int i) {
    unsigned long long reasons = 0;
    abi::Return r = api_.get_throttle(gpus_[i].handle, &reasons);
    Note(i, r);
    if (r != abi::kSuccess) return std::nullopt;
    return (reasons & (abi::kThrottleSwThermal | abi::kThrottleHwThermal)) != 0;
  }

  void ReadEcc(int i, bool report, core::TimeMs now, std::vector<HealthEvent>* out) {
    Gpu& g = gpus_[i];
    for (int t = 0; t < 2; ++t) {
      unsigned long long count = 0;
      abi::Return r =
          api_.get_ecc(g.handle, t == 0 ? abi::kMemoryErrorCorrected : abi::kMemoryErrorUncorrected,
                       abi::kVolatileEcc, &count);
      Note(i, r);
      if (r != abi::kSuccess) continue;  // NOT_SUPPORTED: ECC off
      if (report && g.ecc_known[t] && count > g.ecc[t]) {
        HealthEvent e;
        e.gpu = i;
        e.kind = t == 0 ? HealthEventKind::kEccSingleBit : HealthEventKind::kEccDoubleBit;
        e.code = static_cast<int64_t>(count - g.ecc[t]);
        e.at = now;
        e.detail = "nvmlDeviceGetTotalEccErrors, volatile";
        out->push_back(std::move(e));
        g.faulty = true;
      }
      g.ecc[t] = count;
      g.ecc_known[t] = true;
    }
  }

  void WaitLoop() {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
      }
      abi::EventData d{};
      const abi::Return r = api_.event_set_wait(event_set_, &d, 500);
      if (r == abi::kSuccess) {
        {
          std::lock_guard lock(mu_);
          queue_.push_back(d);
        }
        Wake();
      } else if (r != abi::kErrorTimeout) {
        // GPU_IS_LOST or another failure: let Poll look at every GPU, and
        // do not spin if the call keeps failing at once.
        Wake();
        std::unique_lock lock(mu_);
        stop_cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; });
      }
    }
  }

  void Wake() {
    const char b = 1;
    const ssize_t n = write(pipe_[1], &b, 1);
    (void)n;
  }

  void* lib_;
  NvmlApi api_;
  bool initialized_ = false;
  GpuInventory inventory_;
  std::vector<Gpu> gpus_;  // touched by Start/Poll only
  int pipe_[2] = {-1, -1};
  abi::EventSet event_set_ = nullptr;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;                 // guarded by mu_
  std::deque<abi::EventData> queue_;  // guarded by mu_
  std::thread waiter_;
};

}  // namespace

core::Result<std::unique_ptr<GpuBackend>> MakeNvmlBackend(const NvmlOptions& options) {
  dlerror();
  void* lib = dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    // dlerror() names the library: "libnvidia-ml.so.1: cannot open shared object file: ..."
    return core::Status::Error(
        "cannot load " + (e != nullptr ? std::string(e) : options.library + ": dlopen failed"));
  }
  NvmlApi api;
  std::string missing;
  Bind(lib, "nvmlInit_v2", api.init, missing);
  Bind(lib, "nvmlShutdown", api.shutdown, missing);
  Bind(lib, "nvmlDeviceGetCount_v2", api.get_count, missing);
  Bind(lib, "nvmlDeviceGetHandleByIndex_v2", api.get_handle, missing);
  Bind(lib, "nvmlDeviceGetName", api.get_name, missing);
  Bind(lib, "nvmlDeviceGetUUID", api.get_uuid, missing);
  Bind(lib, "nvmlDeviceGetMemoryInfo", api.get_memory, missing);
  Bind(lib, "nvmlDeviceGetTemperature", api.get_temperature, missing);
  Bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", api.get_throttle, missing);
  Bind(lib, "nvmlDeviceGetTotalEccErrors", api.get_ecc, missing);
  Bind(lib, "nvmlEventSetCreate", api.event_set_create, missing);
  Bind(lib, "nvmlDeviceRegisterEvents", api.register_events, missing);
  Bind(lib, "nvmlEventSetWait_v2", api.event_set_wait, missing);
  std::string optional_missing;
  Bind(lib, "nvmlErrorString", api.error_string, optional_missing);
  Bind(lib, "nvmlEventSetFree", api.event_set_free, optional_missing);
  if (!missing.empty()) {
    dlclose(lib);
    return core::Status::Error(options.library + " lacks " + missing +
                               " (too old an NVIDIA driver, or not NVML)");
  }
  auto backend = std::make_unique<NvmlBackend>(lib, api);  // owns lib from here
  if (core::Status s = backend->Start(); !s.ok()) return s;
  return std::unique_ptr<GpuBackend>(std::move(backend));
}

}  // namespace topo::agent::gpu
