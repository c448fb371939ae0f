// store_crash_writer DB SEED [BATCHES]: what the daemon does, in a loop,
// until killed.
//
// Opens the store, rebuilds a SchedulerCore from it (Replay), then steps
// seeded events and appends them in batches of 1..8; after each Append that
// returned Ok it prints "ack FIRST LAST" (the batch's seqs) and flushes, so
// whatever the parent read was acknowledged. On start it prints "open SEQ"
// with the seq it continues from. Exits by itself after 30 s, or when its
// stdout closes (SIGPIPE), so a lost parent leaves no orphan. With BATCHES,
// it stops after that many acknowledged batches with _exit(0), closing
// nothing: the write-ahead log stays as a crash leaves it (not checkpointed
// into the database), for the tests that cut it.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "store_test_util.hpp"

using namespace topo;
using namespace topo::store;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: store_crash_writer DB SEED [BATCHES]\n");
    return 2;
  }
  const long long stop_after = argc == 4 ? std::strtoll(argv[3], nullptr, 10) : -1;
  try {
    const core::Topology topo = testing::MakeTestTopology();
    core::Result<Store> opened = Store::Open(argv[1]);
    if (!opened.ok()) {
      std::fprintf(stderr, "%s\n", opened.message().c_str());
      return 1;
    }
    Store store = std::move(opened).value();
    core::SchedulerCore core(topo, testing::MakeTestConfig(false));
    core::Result<ReplayReport> replay = store.Replay(core);
    if (!replay.ok()) {
      std::fprintf(stderr, "%s\n", replay.message().c_str());
      return 1;
    }
    if (replay.value().diverged != 0) {
      std::fprintf(stderr, "replay diverged at seq %lld\n",
                   static_cast<long long>(replay.value().first_diverged_seq));
      return 1;
    }
    const uint64_t seed = std::strtoull(argv[2], nullptr, 10) ^ (store.LastSeq() * 0x9E3779B9ULL);
    core::Result<JobId> max_id = store.MaxJobId();
    if (!max_id.ok()) return 1;
    std::printf("open %lld\n", static_cast<long long>(store.LastSeq()));
    std::fflush(stdout);

    std::vector<LogEntry> batch;
    if (store.LastSeq() == 0) {
      for (const core::TenantConfig& t : testing::TestTenants()) {
        core::Event e = core::TenantConfigured{t};
        batch.push_back({0, "admin", e, core.Step(e, 0)});
      }
    }
    testing::Workload workload(topo, seed, max_id.value() + 1, false);
    core::Rng rng(seed + 1);
    core::TimeMs now = store.LastTime();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    long long acked_left = stop_after;
    while (std::chrono::steady_clock::now() < deadline) {
      const uint64_t size = 1 + rng.Below(8);
      while (batch.size() < size) {
        core::Event e = workload.Next(core, now);
        batch.push_back({now, "writer", e, core.Step(e, now)});
      }
      core::Result<AppendResult> r = store.Append(topo, batch);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.message().c_str());
        return 1;
      }
      std::printf("ack %lld %lld\n", static_cast<long long>(r.value().first_seq),
                  static_cast<long long>(r.value().last_seq));
      std::fflush(stdout);
      batch.clear();
      if (stop_after >= 0 && --acked_left <= 0) _exit(0);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_crash_writer: %s\n", e.what());
    return 1;
  }
}
