#pragma once
// GPU inventory and health for topo-agent.
//
// A GpuBackend says which GPUs a node has (Inventory) and what happened to
// them since the last look (Poll). Two backends implement it:
//   - NvmlBackend: NVIDIA's NVML, loaded with dlopen at run time (never
//     linked, no NVIDIA headers needed to build);
//   - SimulatedBackend: N GPUs of a model, faults injected by tests, by the
//     agent's test hooks, or through a FIFO in the agent's state directory.
// MakeGpuBackend picks one and says why.
//
// Wait-fd contract (how the agent reports a fault at once, not at the next
// heartbeat):
//   - WaitFd() is a file descriptor, valid for the backend's lifetime, that
//     the agent adds to its poll()/epoll set (for reading). It becomes
//     readable as soon as the backend has something new for Poll: an
//     injected fault, an NVML XID or ECC event, a GPU found lost.
//   - The agent calls Poll(now) when WaitFd() is readable AND at every
//     heartbeat (counters such as ECC totals and thermal throttling are read
//     by Poll itself, so they are seen at least once per heartbeat). Poll
//     never blocks, drains WaitFd(), and returns the events in the order
//     they happened. The agent never reads WaitFd() itself.
//   - A readable WaitFd() with no event from Poll is allowed (a wake-up that
//     turned out to be nothing); the agent just sends nothing extra.
//   - Thread safety: Poll and Inventory are called from one thread (the
//     agent's loop); the Simulated backend's Inject* may be called from any
//     thread at any time.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"

namespace topo::agent::gpu {

struct GpuInfo {
  int index = 0;              // 0-based, the order CUDA_VISIBLE_DEVICES uses
  std::string name;           // the model, e.g. "NVIDIA H100 80GB HBM3" or "H100"
  std::string uuid;           // "GPU-..."
  uint64_t memory_total = 0;  // bytes
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  int count() const { return static_cast<int>(gpus.size()); }
};

// What can happen to a GPU. One to one with core::GpuEventKind; kThermal
// carries on/off in `on`.
enum class HealthEventKind : uint8_t {
  kXid,           // code: the XID number
  kEccSingleBit,  // code: corrected (single-bit) errors since the last event
  kEccDoubleBit,  // code: uncorrected (double-bit) errors since the last event
  kThermal,       // on: throttling for temperature started (true) or stopped
  kOffBus,        // the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST, XID 79)
  kCleared,       // the GPU is healthy again
};
std::string_view HealthEventKindName(HealthEventKind k);

struct HealthEvent {
  int gpu = 0;
  HealthEventKind kind = HealthEventKind::kCleared;
  int64_t code = 0;  // XID number or ECC count delta; 0 otherwise
  bool on = true;    // kThermal only
  core::TimeMs at = 0;
  std::string detail;  // for logs: "XID 79 from NVML", "injected", ...

  bool operator==(const HealthEvent&) const = default;
};
std::string DescribeEvent(const HealthEvent& e);

// The scheduler core's event for `e` on `node`. Codes beyond INT32_MAX
// saturate. Thermal off gives nullopt: the backends follow it with kCleared
// when nothing else is wrong with the GPU, so the scheduler hears the GPU is
// healthy only then.
std::optional<core::GpuEvent> ToCoreEvent(const HealthEvent& e, core::NodeId node);

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual std::string_view Name() const = 0;  // "nvml" or "simulated"
  virtual const GpuInventory& Inventory() const = 0;
  // Events since the last Poll, oldest first. Never blocks.
  virtual std::vector<HealthEvent> Poll(core::TimeMs now) = 0;
  // See the wait-fd contract above.
  virtual int WaitFd() const = 0;
};

// ---------------------------------------------------------------- simulated

struct SimulatedOptions {
  int gpus = 8;  // 1-64
  std::string model = "H100";
  uint64_t memory_total = 80ULL << 30;  // bytes per GPU
  std::string uuid_prefix = "GPU-sim";  // UUIDs are PREFIX-NODE-INDEX
  std::string node;                     // goes into the UUIDs
  // When set, the backend creates DIR/inject as a FIFO and reads fault lines
  // from it (see ParseInjectLine); bad lines go to DIR/inject.errors.
  std::string inject_dir;
};

// `{"gpus": 8, "model": "H100", "memory_gib": 80}`; every key optional.
core::Result<SimulatedOptions> ParseSimulatedConfig(std::string_view json_text,
                                                    SimulatedOptions defaults = {});
core::Result<SimulatedOptions> LoadSimulatedConfig(const std::string& path,
                                                   SimulatedOptions defaults = {});

// One line of the injection language:
//   xid GPU CODE          an XID error, e.g. "xid 3 79"
//   ecc GPU SINGLE DOUBLE corrected and uncorrected ECC errors to add
//   thermal GPU on|off    thermal throttling starts or stops
//   offbus GPU            the GPU falls off the bus ("lost" is a synonym)
//   clear GPU             every fault of the GPU is cleared
// Blank lines and lines starting with '#' are nothing (nullopt). Errors name
// the line number and the fix.
struct InjectCommand {
  HealthEventKind kind = HealthEventKind::kXid;
  int gpu = 0;
  int64_t a = 0;  // XID code, ECC single, thermal on (1/0)
  int64_t b = 0;  // ECC double
};
core::Result<std::optional<InjectCommand>> ParseInjectLine(std::string_view line, int line_no,
                                                           int gpu_count);
// Every line of `text`; all errors, one per line, joined with '\n'.
core::Result<std::vector<InjectCommand>> ParseInjectCommands(std::string_view text, int gpu_count);

class SimulatedBackend : public GpuBackend {
 public:
  // Fails when the options are out of range or the inject FIFO cannot be made.
  static core::Result<std::unique_ptr<SimulatedBackend>> Create(const SimulatedOptions& options);
  ~SimulatedBackend() override;

  std::string_view Name() const override { return "simulated"; }
  const GpuInventory& Inventory() const override;
  std::vector<HealthEvent> Poll(core::TimeMs now) override;
  int WaitFd() const override;

  // Thread safe; events come out of Poll in injection order. A GPU index out
  // of range is an error.
  core::Status InjectXid(int gpu, int code);
  core::Status InjectEcc(int gpu, int64_t single_bit, int64_t double_bit);
  core::Status InjectThermal(int gpu, bool on);
  core::Status InjectOffBus(int gpu);
  core::Status Clear(int gpu);
  core::Status Inject(const InjectCommand& c);

  // Bad lines read from the inject FIFO so far ("line N: ...").
  std::vector<std::string> InjectErrors() const;
  std::string InjectPath() const;  // DIR/inject, or "" without inject_dir

 private:
  struct Impl;
  explicit SimulatedBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- NVML

struct NvmlOptions {
  // What dlopen opens: a soname looked up the usual way, or a path (tests
  // point it at a fake library).
  std::string library = "libnvidia-ml.so.1";
};

// Fails with the reason (dlopen's message, a missing symbol, nvmlInit's
// error) when NVML cannot be used.
core::Result<std::unique_ptr<GpuBackend>> MakeNvmlBackend(const NvmlOptions& options);

// ---------------------------------------------------------------- choice

enum class BackendChoice : uint8_t { kAuto, kNvml, kSimulated };
// "auto", "nvml", "simulated"
std::optional<BackendChoice> ParseBackendChoice(std::string_view s);

struct GpuBackendOptions {
  BackendChoice choice = BackendChoice::kAuto;
  NvmlOptions nvml;
  SimulatedOptions simulated;
};

struct ChosenBackend {
  std::unique_ptr<GpuBackend> backend;
  std::string reason;  // which backend and why, for the agent's log
};

// kAuto: NVML when the library loads and nvmlInit succeeds, else simulated
// (the reason says what NVML lacked). kNvml / kSimulated: only that one; an
// error when it cannot be made.
core::Result<ChosenBackend> MakeGpuBackend(const GpuBackendOptions& options);

}  // namespace topo::agent::gpu
