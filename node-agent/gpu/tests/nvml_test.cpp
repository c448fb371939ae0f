// The NVML backend, through dlopen: the absent library, a library that is
// not NVML, and the fake libnvidia-ml built next to these tests.

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <chrono>

#include "gpu/gpu_backend.hpp"
#include "test_util.hpp"

using namespace topo::agent::gpu;

namespace {

// The fake's controls; dlopen of the same path shares the backend's copy.
struct Fake {
  void* lib = dlopen(TOPO_FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
  template <typename Fn>
  Fn Get(const char* name) {
    REQUIRE(lib != nullptr);
    void* p = dlsym(lib, name);
    REQUIRE_MESSAGE(p != nullptr, name);
    return reinterpret_cast<Fn>(p);
  }
  void Reset(unsigned gpus) { Get<void (*)(unsigned)>("fake_nvml_reset")(gpus); }
  void InitResult(int r) { Get<void (*)(int)>("fake_nvml_set_init_result")(r); }
  int LiveInits() { return Get<int (*)()>("fake_nvml_live_inits")(); }
  void Xid(unsigned gpu, unsigned long long code) {
    Get<void (*)(unsigned, unsigned long long)>("fake_nvml_inject_xid")(gpu, code);
  }
  void Lost(unsigned gpu) { Get<void (*)(unsigned)>("fake_nvml_set_lost")(gpu); }
  void Thermal(unsigned gpu, int on) {
    Get<void (*)(unsigned, int)>("fake_nvml_set_thermal")(gpu, on);
  }
  void Ecc(unsigned gpu, unsigned long long c, unsigned long long u) {
    Get<void (*)(unsigned, unsigned long long, unsigned long long)>("fake_nvml_add_ecc")(gpu, c, u);
  }
  ~Fake() {
    if (lib != nullptr) dlclose(lib);
  }
};

GpuBackendOptions FakeOptions(BackendChoice choice = BackendChoice::kAuto) {
  GpuBackendOptions o;
  o.choice = choice;
  o.nvml.library = TOPO_FAKE_NVML_PATH;
  o.simulated.gpus = 4;
  return o;
}

}  // namespace

TEST_CASE("no libnvidia-ml: auto falls back to simulated and says why") {
  GpuBackendOptions o;
  o.nvml.library = "libnvidia-ml-absent-for-test.so.1";
  o.simulated.gpus = 2;
  o.simulated.model = "A100";
  auto r = MakeGpuBackend(o);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().backend->Name() == "simulated");
  CHECK(r.value().backend->Inventory().count() == 2);
  const std::string& why = r.value().reason;
  CHECK(why.find("simulated: 2 x A100, NVML unavailable (cannot load "
                 "libnvidia-ml-absent-for-test.so.1: ") == 0);
  MESSAGE(why);

  o.choice = BackendChoice::kNvml;
  auto forced = MakeGpuBackend(o);
  REQUIRE_FALSE(forced.ok());
  CHECK(forced.message().find("NVML backend requested but unavailable: cannot load") == 0);

  o.choice = BackendChoice::kSimulated;
  auto sim = MakeGpuBackend(o);
  REQUIRE(sim.ok());
  CHECK(sim.value().reason == "simulated: 2 x A100, requested");
}

TEST_CASE("the default library name is libnvidia-ml.so.1") {
  CHECK(NvmlOptions{}.library == "libnvidia-ml.so.1");
  // On a machine without NVIDIA's driver (this one) auto is simulated.
  auto r = MakeGpuBackend(GpuBackendOptions{});
  REQUIRE(r.ok());
  MESSAGE(r.value().reason);
}

TEST_CASE("a library that is not NVML is refused, naming the missing symbols") {
  GpuBackendOptions o;
  o.nvml.library = "libm.so.6";
  auto r = MakeGpuBackend(o);
  REQUIRE(r.ok());
  CHECK(r.value().backend->Name() == "simulated");
  CHECK(r.value().reason.find("libm.so.6 lacks nvmlInit_v2, nvmlShutdown") != std::string::npos);
}

TEST_CASE("fake NVML: nvmlInit failing falls back with NVML's error") {
  Fake fake;
  fake.Reset(2);
  fake.InitResult(9);
  auto r = MakeGpuBackend(FakeOptions());
  REQUIRE(r.ok());
  CHECK(r.value().backend->Name() == "simulated");
  CHECK(r.value().reason.find("nvmlInit_v2 failed: NVML error 9 (Driver Not Loaded)") !=
        std::string::npos);
  fake.Reset(2);
}

TEST_CASE("fake NVML through dlopen: inventory, XID 79 at once, GPU lost") {
  Fake fake;
  fake.Reset(2);
  {
    auto r = MakeGpuBackend(FakeOptions(BackendChoice::kNvml));
    REQUIRE_MESSAGE(r.ok(), r.message());
    GpuBackend& b = *r.value().backend;
    CHECK(b.Name() == "nvml");
    CHECK(r.value().reason.find("nvml: loaded ") == 0);
    CHECK(fake.LiveInits() == 1);
    const GpuInventory& inv = b.Inventory();
    REQUIRE(inv.count() == 2);
    CHECK(inv.gpus[0].name == "Fake H100 80GB");
    CHECK(inv.gpus[1].uuid == "GPU-fake-0001");
    CHECK(inv.gpus[1].memory_total == (80ULL << 30));
    CHECK(b.Poll(0).empty());

    // XID 79 on GPU 1: the wait fd turns readable well within a heartbeat.
    const auto t0 = std::chrono::steady_clock::now();
    fake.Xid(1, 79);
    REQUIRE(Readable(b.WaitFd(), 2000));
    const auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited < std::chrono::milliseconds(500));
    auto ev = b.Poll(10);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0] ==
          HealthEvent{1, HealthEventKind::kXid, 79, true, 10, "nvmlEventTypeXidCriticalError"});
    auto core_event = ToCoreEvent(ev[0], 5);
    REQUIRE(core_event);
    CHECK(core_event->kind == topo::core::GpuEventKind::kXid);
    CHECK(core_event->code == 79);

    // Thermal throttling and ECC counters are read by Poll (each heartbeat).
    fake.Thermal(0, 1);
    fake.Ecc(0, 3, 1);
    ev = b.Poll(20);
    REQUIRE(ev.size() == 3);
    CHECK((ev[0].kind == HealthEventKind::kEccSingleBit && ev[0].code == 3 && ev[0].gpu == 0));
    CHECK((ev[1].kind == HealthEventKind::kEccDoubleBit && ev[1].code == 1));
    CHECK((ev[2].kind == HealthEventKind::kThermal && ev[2].on));
    CHECK(ev[2].detail.find("91 C") != std::string::npos);
    fake.Thermal(0, 0);
    ev = b.Poll(30);
    REQUIRE(ev.size() == 1);  // not cleared: GPU 0 had ECC errors
    CHECK((ev[0].kind == HealthEventKind::kThermal && !ev[0].on));

    // GPU 1 falls off the bus: the waiter sees GPU_IS_LOST and wakes Poll.
    fake.Lost(1);
    REQUIRE(Readable(b.WaitFd(), 2000));
    ev = b.Poll(40);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0] == HealthEvent{1, HealthEventKind::kOffBus, 0, true, 40, "NVML_ERROR_GPU_IS_LOST"});
    CHECK(ToCoreEvent(ev[0], 5)->kind == topo::core::GpuEventKind::kOffBus);
    CHECK(b.Poll(50).empty());  // reported once
  }
  CHECK(fake.LiveInits() == 0);  // nvmlShutdown on destruction
}

TEST_CASE("fake NVML: a GPU already lost at start is reported off the bus") {
  Fake fake;
  fake.Reset(3);
  fake.Lost(2);
  auto r = MakeGpuBackend(FakeOptions());
  REQUIRE_MESSAGE(r.ok(), r.message());
  GpuBackend& b = *r.value().backend;
  REQUIRE(b.Name() == "nvml");
  REQUIRE(b.Inventory().count() == 3);
  auto ev = b.Poll(1);
  REQUIRE(ev.size() == 1);
  CHECK((ev[0].gpu == 2 && ev[0].kind == HealthEventKind::kOffBus));
  fake.Reset(2);
}
