// bench_store: what one group commit (Store::Append) costs with the commit
// mark, which adds an fdatasync of a 4 KiB overwrite after SQLite's commit,
// and without it (OpenOptions::commit_mark off, as no daemon runs).
//
// For each --batch B it opens two fresh stores in --dir, one with the mark
// and one without, and appends --commits batches of B job submissions to
// each, alternating between them commit by commit so both see the same disk
// and the same neighbours. It prints the median and p99 of Append's wall
// time and the events per second each way.
//
//   bench_store [--commits 300] [--batch 1,16,256] [--dir /var/lib/toposched-bench]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "machine.hpp"
#include "store/store.hpp"
#include "topo/core/generators.hpp"

namespace {

namespace core = topo::core;
namespace store = topo::store;
using Clock = std::chrono::steady_clock;

struct Way {
  std::unique_ptr<store::Store> st;
  std::unique_ptr<core::SchedulerCore> sched;
  std::vector<double> ms;
};

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_store: a group commit's cost with and without the commit mark"};
  int commits = 300;
  std::vector<int> batches = {1, 16, 256};
  std::string dir = std::filesystem::temp_directory_path().string();
  app.add_option("--commits", commits, "Appends per store and batch size")
      ->check(CLI::Range(10, 1000000));
  app.add_option("--batch", batches, "events per Append")->delimiter(',');
  app.add_option("--dir", dir, "where the stores are written (the disk measured)");
  CLI11_PARSE(app, argc, argv);
  const topo::bench::MachineInfo machine = topo::bench::ReadMachine(TOPO_BENCH_SOURCE_DIR);
  std::cout << "commit " << machine.git_commit << (machine.git_dirty ? "-dirty" : "") << ", "
            << machine.cpu_model << ", " << dir << "\n";
  core::Result<core::Topology> topo = core::GenerateTopology("tiny");
  if (!topo.ok()) {
    std::cerr << "bench_store: " << topo.message() << "\n";
    return 1;
  }
  std::cout << std::flush;
  std::printf("%8s %6s %12s %12s %14s\n", "batch", "mark", "median ms", "p99 ms", "events/s");
  for (int batch : batches) {
    if (batch < 1) continue;
    Way ways[2];
    for (int w = 0; w < 2; ++w) {
      const std::string path =
          dir + "/bench-store-" + std::to_string(batch) + (w == 0 ? "-mark" : "-nomark") + ".db";
      for (const char* tail : {"", "-wal", "-shm", ".mark"}) std::filesystem::remove(path + tail);
      store::OpenOptions options;
      options.commit_mark = w == 0;
      core::Result<store::Store> opened = store::Store::Open(path, options);
      if (!opened.ok()) {
        std::cerr << "bench_store: " << opened.message() << "\n";
        return 1;
      }
      ways[w].st = std::make_unique<store::Store>(std::move(opened).value());
      ways[w].sched = std::make_unique<core::SchedulerCore>(topo.value(), core::SchedulerConfig{});
    }
    core::TimeMs now = 1'700'000'000'000;
    core::JobId id = 0;
    for (int c = 0; c < commits; ++c) {
      for (Way& way : ways) {
        std::vector<store::LogEntry> entries;
        for (int i = 0; i < batch; ++i) {
          core::JobRequest r;
          r.spec.name = "bench-" + std::to_string(++id);
          r.spec.gpus = 8;
          r.spec.parallelism.dp = 8;
          r.tenant = "default";
          r.user = "admin";
          r.command = {"true"};
          core::Event e = core::JobSubmitted{id, r};
          entries.push_back({now, "user:admin", e, way.sched->Step(e, now)});
          core::Event done = core::JobCancelled{id, "bench"};
          way.sched->Step(done, now);  // keeps the core small; not logged
        }
        const auto t0 = Clock::now();
        core::Result<store::AppendResult> a = way.st->Append(topo.value(), entries);
        way.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!a.ok()) {
          std::cerr << "bench_store: " << a.message() << "\n";
          return 1;
        }
        way.sched->TakeFinishedJobs();
      }
      now += 1000;
    }
    for (int w = 0; w < 2; ++w) {
      double total = 0;
      for (double m : ways[w].ms) total += m;
      std::printf("%8d %6s %12.2f %12.2f %14.0f\n", batch, w == 0 ? "on" : "off",
                  Quantile(ways[w].ms, 0.5), Quantile(ways[w].ms, 0.99),
                  total > 0 ? 1000.0 * batch * commits / total : 0.0);
      const std::string path = ways[w].st->path();
      ways[w].st.reset();
      for (const char* tail : {"", "-wal", "-shm", ".mark"}) std::filesystem::remove(path + tail);
    }
  }
  return 0;
}
