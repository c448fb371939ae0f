#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gpu/gpu_backend.hpp"
#include "test_util.hpp"

using namespace topo::agent::gpu;

namespace {
std::unique_ptr<SimulatedBackend> Make(SimulatedOptions o) {
  auto r = SimulatedBackend::Create(o);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r).value();
}
}  // namespace

TEST_CASE("simulated inventory") {
  SimulatedOptions o;
  o.gpus = 4;
  o.model = "H200";
  o.node = "n7";
  auto b = Make(o);
  CHECK(b->Name() == "simulated");
  REQUIRE(b->Inventory().count() == 4);
  CHECK(b->Inventory().gpus[3].index == 3);
  CHECK(b->Inventory().gpus[3].name == "H200");
  CHECK(b->Inventory().gpus[3].uuid == "GPU-sim-n7-3");
  CHECK(b->Inventory().gpus[0].memory_total == (80ULL << 30));
  o.gpus = 0;
  CHECK(SimulatedBackend::Create(o).message().find("1 to 64") != std::string::npos);
}

TEST_CASE("simulated injections come out in order, and wake the fd") {
  auto b = Make({});
  CHECK_FALSE(Readable(b->WaitFd(), 0));
  CHECK(b->Poll(1).empty());
  REQUIRE(b->InjectXid(3, 79).ok());
  CHECK(Readable(b->WaitFd(), 0));
  REQUIRE(b->InjectEcc(1, 5, 2).ok());
  REQUIRE(b->InjectThermal(2, true).ok());
  REQUIRE(b->InjectThermal(2, true).ok());  // no change, no event
  REQUIRE(b->InjectOffBus(4).ok());
  REQUIRE(b->InjectOffBus(4).ok());  // already lost
  REQUIRE(b->Clear(3).ok());
  CHECK(b->InjectXid(8, 79).message().find("out of range") != std::string::npos);
  const auto ev = b->Poll(100);
  CHECK_FALSE(Readable(b->WaitFd(), 0));  // Poll drained it
  REQUIRE(ev.size() == 6);
  CHECK(ev[0] == HealthEvent{3, HealthEventKind::kXid, 79, true, 100, "injected"});
  CHECK(ev[1] == HealthEvent{1, HealthEventKind::kEccSingleBit, 5, true, 100, "injected"});
  CHECK(ev[2] == HealthEvent{1, HealthEventKind::kEccDoubleBit, 2, true, 100, "injected"});
  CHECK(ev[3] == HealthEvent{2, HealthEventKind::kThermal, 0, true, 100, "injected"});
  CHECK(ev[4] == HealthEvent{4, HealthEventKind::kOffBus, 0, true, 100, "injected"});
  CHECK(ev[5] == HealthEvent{3, HealthEventKind::kCleared, 0, true, 100, "injected"});
  CHECK(b->Poll(200).empty());

  // Thermal off clears a GPU with nothing else wrong, not one with an XID.
  REQUIRE(b->InjectThermal(2, false).ok());
  REQUIRE(b->InjectXid(5, 48).ok());
  REQUIRE(b->InjectThermal(5, true).ok());
  REQUIRE(b->InjectThermal(5, false).ok());
  const auto ev2 = b->Poll(300);
  REQUIRE(ev2.size() == 5);
  CHECK((ev2[0].kind == HealthEventKind::kThermal && !ev2[0].on && ev2[0].gpu == 2));
  CHECK((ev2[1].kind == HealthEventKind::kCleared && ev2[1].gpu == 2));
  CHECK(ev2[2].kind == HealthEventKind::kXid);
  CHECK((ev2[3].kind == HealthEventKind::kThermal && ev2[3].on));
  CHECK((ev2[4].kind == HealthEventKind::kThermal && !ev2[4].on && ev2[4].gpu == 5));
}

TEST_CASE("simulated injections from other threads wake a waiting poll") {
  auto b = Make({});
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int i = 0; i < 100; ++i) REQUIRE(b->InjectXid(i % 8, 13).ok());
  });
  CHECK(Readable(b->WaitFd(), 5000));
  size_t seen = 0;
  for (int tries = 0; tries < 500 && seen < 100; ++tries) {
    Readable(b->WaitFd(), 10);
    seen += b->Poll(tries).size();
  }
  t.join();
  seen += b->Poll(1000).size();
  CHECK(seen == 100);
}

TEST_CASE("file-based injection through STATE_DIR/inject") {
  const std::string dir = TempDir();
  REQUIRE_FALSE(dir.empty());
  SimulatedOptions o;
  o.inject_dir = dir;
  auto b = Make(o);
  REQUIRE(b->InjectPath() == dir + "/inject");
  struct stat st {};
  REQUIRE(stat(b->InjectPath().c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK_FALSE(Readable(b->WaitFd(), 0));

  {  // what `echo 'xid 3 79' > STATE_DIR/inject` does
    std::ofstream f(b->InjectPath());
    f << "xid 3 79\nbogus 1\n# comment\nthermal 2 on\nxid 99 1\n";
  }
  CHECK(Readable(b->WaitFd(), 2000));
  REQUIRE(b->InjectEcc(0, 1, 0).ok());
  auto ev = b->Poll(10);
  REQUIRE(ev.size() == 3);
  CHECK(ev[0] == HealthEvent{0, HealthEventKind::kEccSingleBit, 1, true, 10, "injected"});
  CHECK((ev[1].gpu == 3 && ev[1].kind == HealthEventKind::kXid && ev[1].code == 79));
  CHECK((ev[2].gpu == 2 && ev[2].kind == HealthEventKind::kThermal && ev[2].on));
  const auto errors = b->InjectErrors();
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].find("line 2: unknown fault 'bogus'") == 0);
  CHECK(errors[1].find("line 5: GPU 99 out of range") == 0);
  std::ifstream err(dir + "/inject.errors");
  std::string first;
  std::getline(err, first);
  CHECK(first.find("line 2: unknown fault") == 0);

  {  // A second writer; line numbers go on; a partial line waits for its end.
    std::ofstream f(b->InjectPath());
    f << "offbus 1\nclear";
  }
  CHECK(Readable(b->WaitFd(), 2000));
  ev = b->Poll(20);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].kind == HealthEventKind::kOffBus);
  {
    std::ofstream f(b->InjectPath());
    f << " 1\nxid 1\n";
  }
  CHECK(Readable(b->WaitFd(), 2000));
  ev = b->Poll(30);
  REQUIRE(ev.size() == 1);
  CHECK((ev[0].kind == HealthEventKind::kCleared && ev[0].gpu == 1));
  REQUIRE(b->InjectErrors().size() == 3);
  CHECK(b->InjectErrors()[2].find("line 8: 'xid' takes 2") == 0);

  // A restarted agent reuses the FIFO; a regular file in its place is refused.
  b.reset();
  auto again = SimulatedBackend::Create(o);
  CHECK(again.ok());
  std::filesystem::remove(dir + "/inject");
  std::ofstream(dir + "/inject") << "x";
  CHECK(SimulatedBackend::Create(o).message().find("not a FIFO") != std::string::npos);
  std::filesystem::remove_all(dir);
}
