// bench_restart: how long topo-scheduler takes from process start to an API
// that answers with every job restored, after long histories, with and
// without snapshots (issue 15: <= 2 s after 1,000,000 jobs, flat in history).
//
// For each --jobs N it writes a state directory in-process, through the same
// core and Store API the daemon uses (HTTP would take hours): the topology
// imported, every node registered, then N jobs, each submitted (it starts at
// once) and finished, in group commits of 1,000 events, with a snapshot every
// --snapshot-every events as the daemon's default takes them. Then it starts
// the real topo-scheduler on that directory and times fork -> GET
// /v1/jobs/<last id> answering 200 (the job's row read after the core was
// rebuilt). "without": the same file with its snapshots deleted, so the start
// replays the whole log (only up to --full-replay-max-jobs: that grows with
// the history by design).
//
//   bench_restart [--jobs 100000,1000000] [--topology tiny] [--snapshot-every 10000]
//                 [--full-replay-max-jobs 100000] [--out bench/results/restart.json]

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "daemon/config.hpp"
#include "machine.hpp"
#include "store/store.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/core/generators.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace core = topo::core;
namespace store = topo::store;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

struct History {
  int64_t events = 0;
  int64_t snapshots = 0;
  core::JobId last_job = 0;
  double seconds = 0;
};

// Writes `jobs` jobs' events into dir/topo.db as the daemon would.
core::Result<History> Generate(const std::string& dir, const core::Topology& topo, int64_t jobs,
                               int64_t snapshot_every) {
  const auto t0 = Clock::now();
  topo::daemon::DaemonConfig config;
  core::Result<core::SchedulerConfig> sc = config.SchedulerConfig();
  if (!sc.ok()) return sc.status();
  core::Result<store::Store> opened = store::Store::Open(dir + "/topo.db");
  if (!opened.ok()) return opened.status();
  store::Store st = std::move(opened).value();
  const std::pair<std::string, std::string> meta[] = {
      {"topology", topo::common::TopologyToJson(topo)},
      {"topology_from_seq", "1"},
      {"policy", topo::daemon::PolicyJson(config)}};
  if (core::Status s = st.SetMetas(meta); !s.ok()) return s;
  core::SchedulerCore sched(topo, sc.value());
  History h;
  std::vector<store::LogEntry> batch;
  core::TimeMs now = 1'700'000'000'000;
  int64_t last_snapshot = 0;
  auto step = [&](const core::Event& e, const char* actor) -> core::Status {
    batch.push_back({now, actor, e, sched.Step(e, now)});
    if (batch.size() < 1000) return core::Status::Ok();
    core::Result<store::AppendResult> r = st.Append(topo, batch);
    if (!r.ok()) return r.status();
    batch.clear();
    sched.TakeFinishedJobs();
    if (snapshot_every > 0 && st.LastSeq() - last_snapshot >= snapshot_every) {
      last_snapshot = st.LastSeq();
      ++h.snapshots;
      return st.WriteSnapshot(static_cast<int>(core::SchedulerCore::kSnapshotVersion),
                              sched.Snapshot(), now);
    }
    return core::Status::Ok();
  };
  for (core::NodeId n = 0; n < topo.node_count(); ++n) {
    if (core::Status s =
            step(core::NodeStateRequested{n, core::NodeState::kUp, "agent registered"}, "agent");
        !s.ok()) {
      return s;
    }
  }
  // A job starts at submission and ends a minute later; the last ones keep
  // running, so the restored core holds live jobs.
  const int64_t keep_running = std::min<int64_t>(jobs, topo.node_count() / 2);
  for (core::JobId id = 1; id <= jobs; ++id) {
    now += 1000;
    core::JobRequest r;
    r.spec.name = "bench-" + std::to_string(id);
    r.spec.gpus = topo.max_node_gpus();
    r.spec.parallelism.dp = r.spec.gpus;
    r.tenant = "default";
    r.user = "admin";
    r.unix_user = "admin";
    r.command = {"python", "train.py"};
    r.time_limit = core::kHour;
    if (core::Status s = step(core::JobSubmitted{id, r}, "user:admin"); !s.ok()) return s;
    if (id <= jobs - keep_running) {
      if (core::Status s = step(core::JobFinished{id, 0}, "agent"); !s.ok()) return s;
    }
  }
  if (!batch.empty()) {
    core::Result<store::AppendResult> r = st.Append(topo, batch);
    if (!r.ok()) return r.status();
  }
  h.events = st.LastSeq();
  h.last_job = jobs;
  h.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return h;
}

// One GET; the HTTP status, or -1 when the daemon does not answer yet.
int Get(int port, const std::string& ca, const std::string& token, const std::string& target) {
  try {
    ssl::context tls(ssl::context::tls_client);
    tls.load_verify_file(ca);
    tls.set_verify_mode(ssl::verify_peer);
    net::io_context ioc;
    beast::ssl_stream<beast::tcp_stream> stream(ioc, tls);
    tcp::resolver resolver(ioc);
    beast::get_lowest_layer(stream).connect(resolver.resolve("127.0.0.1", std::to_string(port)));
    stream.handshake(ssl::stream_base::client);
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + token);
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(stream, buf, res);
    return res.result_int();
  } catch (const std::exception&) {
    return -1;
  }
}

struct Restart {
  double ms = -1;           // fork -> the job answered 200
  std::string daemon_line;  // what the daemon said about the rebuild
};

// Starts topo-scheduler on dir and times it until GET /v1/jobs/<job> is 200.
Restart TimeRestart(const std::string& binary, const std::string& dir, core::JobId job) {
  std::filesystem::remove(dir + "/endpoint");
  const std::string log = dir + "/daemon.log";
  Restart out;
  std::cout.flush();  // the child must not write the parent's buffered table again
  std::fflush(nullptr);
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f != nullptr) dup2(fileno(stdout), 2);
    execl(binary.c_str(), binary.c_str(), "--state-dir", dir.c_str(), "--listen", "127.0.0.1:0",
          nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600 * 1000; ++i) {
    const std::string url = Slurp(dir + "/endpoint");
    if (!url.empty() && url.back() == '\n') {
      const int port = std::stoi(url.substr(url.rfind(':') + 1));
      const std::string token = Trim(Slurp(dir + "/admin-token"));
      if (Get(port, dir + "/ca.pem", token, "/v1/jobs/" + std::to_string(job)) == 200) {
        out.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        break;
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::istringstream lines(Slurp(log));
  for (std::string line; std::getline(lines, line);) {
    if (line.find("snapshot") != std::string::npos || line.find("replayed") != std::string::npos) {
      out.daemon_line = line;
    }
  }
  if (out.ms < 0) std::cerr << "bench_restart: the daemon did not answer:\n" << Slurp(log);
  return out;
}

bool DeleteSnapshots(const std::string& db) {
  sqlite3* h = nullptr;
  if (sqlite3_open(db.c_str(), &h) != SQLITE_OK) return false;
  const bool ok = sqlite3_exec(h, "DELETE FROM snapshots", nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(h);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_restart - topo-scheduler's restart time after long histories"};
  std::string daemon_bin = TOPO_SCHEDULER_BIN, topology = "tiny", out, dir_base = "/tmp";
  std::vector<int64_t> jobs = {100000, 1000000};
  int64_t snapshot_every = 10000, full_max = 100000;
  app.add_option("--daemon", daemon_bin, "topo-scheduler binary");
  app.add_option("--jobs", jobs, "history sizes in jobs (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--topology", topology, "reference topology (core generators)");
  app.add_option("--snapshot-every", snapshot_every,
                 "events between snapshots (the daemon's "
                 "snapshot_every_events default)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--full-replay-max-jobs", full_max,
                 "measure the start without snapshots only up to this many jobs");
  app.add_option("--dir", dir_base, "where the state directories go (default /tmp)");
  app.add_option("--out", out, "JSON results (default bench/results/restart.json)");
  CLI11_PARSE(app, argc, argv);
  if (out.empty()) out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/restart.json";
  core::Result<core::Topology> topo = core::GenerateTopology(topology);
  if (!topo.ok()) {
    std::cerr << "bench_restart: " << topo.message() << "\n";
    return 1;
  }
  const topo::bench::MachineInfo machine = topo::bench::ReadMachine(TOPO_BENCH_SOURCE_DIR);
  Json rows = Json::array();
  std::cout << std::left << std::setw(10) << "jobs" << std::setw(10) << "events" << std::setw(11)
            << "snapshots" << std::setw(14) << "with (ms)" << std::setw(16) << "without (ms)"
            << "generate (s)\n";
  for (int64_t n : jobs) {
    const std::string dir = dir_base + "/topo-bench-restart-" + std::to_string(n);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    core::Result<History> h = Generate(dir, topo.value(), n, snapshot_every);
    if (!h.ok()) {
      std::cerr << "bench_restart: " << h.message() << "\n";
      return 1;
    }
    const Restart with = TimeRestart(daemon_bin, dir, h.value().last_job);
    Restart without;
    if (n <= full_max && DeleteSnapshots(dir + "/topo.db")) {
      without = TimeRestart(daemon_bin, dir, h.value().last_job);
    }
    std::cout << std::setw(10) << n << std::setw(10) << h.value().events << std::setw(11)
              << h.value().snapshots << std::setw(14) << std::fixed << std::setprecision(0)
              << with.ms << std::setw(16)
              << (without.ms < 0 ? std::string("-") : std::to_string(int64_t(without.ms)))
              << std::setprecision(1) << h.value().seconds << "\n";
    std::cout << "  with:    " << with.daemon_line << "\n";
    if (without.ms >= 0) std::cout << "  without: " << without.daemon_line << "\n";
    rows.push_back({{"jobs", n},
                    {"events", h.value().events},
                    {"snapshots", h.value().snapshots},
                    {"restart_ms_with_snapshots", with.ms},
                    {"restart_ms_full_replay", without.ms < 0 ? Json(nullptr) : Json(without.ms)},
                    {"daemon_with", with.daemon_line},
                    {"daemon_without", without.daemon_line},
                    {"generate_s", h.value().seconds}});
    std::filesystem::remove_all(dir);
  }
  Json result = {{"benchmark", "restart"},
                 {"topology", topology},
                 {"snapshot_every_events", snapshot_every},
                 {"git_commit", machine.git_commit},
                 {"git_dirty", machine.git_dirty},
                 {"host", machine.hostname},
                 {"cpu", machine.cpu_model},
                 {"nproc", machine.nproc},
                 {"started_at", machine.started_at},
                 {"results", rows}};
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out) << result.dump(2) << "\n";
  std::cout << "wrote " << out << "\n";
  return 0;
}
