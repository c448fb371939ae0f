// bench_api: durable submissions per second through topo-scheduler's HTTPS
// API, with p50/p99 latency at that load (issue: >= 5,000 acknowledged
// submissions/s; Slurm documents about 500/s for sbatch).
//
// It starts a real topo-scheduler in a temporary state directory (real
// SQLite file, synchronous=FULL, real TLS on loopback), imports a reference
// topology, brings its nodes up, then drives POST /v1/jobs from C keep-alive
// connections (Boost.Beast, one I/O thread) in two phases:
//   fill:  jobs that start at once, until the cluster is full;
//   queue: jobs that queue behind them (every submission runs a scheduling
//          pass over a growing queue).
//   queue+scans: the queue phase again while --scanners clients page through
//          the whole event log (GET /v1/events) as fast as they can: those
//          reads run off the scheduling strand on read-only connections, so
//          submissions should not slow down (the ratio is reported).
// A submission counts when its 201 arrived: the daemon answers only after
// the job's group commit is on disk. Bounded in count (--requests per phase)
// and time (--max-seconds per phase).
//
//   bench_api [--topology meta-24k] [--connections 64] [--requests 20000]
//             [--gpus 8] [--max-seconds 60] [--scanners 4] [--out bench/results/api.json]
//             [--extra-config FILE]   (more daemon settings; bench/ha runs HA mode with it)

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
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

#include "machine.hpp"
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

struct Daemon {
  pid_t pid = -1;
  std::string dir, url, token;
  int port = 0;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// extra_config: more `key = value` lines for the daemon (bench/ha: HA mode).
bool StartDaemon(const std::string& binary, const std::string& extra_config, Daemon& d) {
  char tmpl[] = "/tmp/topo-bench-api-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return false;
  d.dir = tmpl;
  // One user (the admin) submits everything: its caps on connections and on
  // waiting jobs (max_queued_jobs_per_user, 10,000 by default, would refuse
  // half of the queue phases' jobs with 409) are lifted, as the rate limit
  // is; what is measured is the API, not the caps.
  std::ofstream(d.dir + "/bench.conf") << "rate_limit_per_second = 100000000\n"
                                          "max_queued_jobs_per_user = 0\n"
                                          "max_connections = 100000\n"
                                          "max_unauthenticated_per_peer = 100000\n"
                                          "max_connections_per_user = 100000\n"
                                          "io_threads = 2\n"
                                       << extra_config;
  d.pid = fork();
  if (d.pid == 0) {
    const std::string log = d.dir + "/daemon.log";
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f != nullptr) dup2(fileno(stdout), 2);
    execl(binary.c_str(), binary.c_str(), "--state-dir", d.dir.c_str(), "--listen", "127.0.0.1:0",
          "--config", (d.dir + "/bench.conf").c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 400; ++i) {
    std::string url = Slurp(d.dir + "/endpoint");
    if (!url.empty() && url.back() == '\n') {
      url.pop_back();
      d.url = url;
      d.port = std::stoi(url.substr(url.rfind(':') + 1));
      d.token = Slurp(d.dir + "/admin-token");
      while (!d.token.empty() && d.token.back() == '\n') d.token.pop_back();
      return true;
    }
    int status = 0;
    if (waitpid(d.pid, &status, WNOHANG) == d.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "bench_api: topo-scheduler did not start:\n" << Slurp(d.dir + "/daemon.log");
  return false;
}

void StopDaemon(Daemon& d) {
  if (d.pid > 0) {
    kill(d.pid, SIGTERM);
    int status = 0;
    waitpid(d.pid, &status, 0);
  }
  std::error_code ec;
  if (!d.dir.empty()) std::filesystem::remove_all(d.dir, ec);
}

ssl::context MakeTls(const Daemon& d) {
  ssl::context ctx(ssl::context::tls_client);
  ctx.load_verify_file(d.dir + "/ca.pem");
  ctx.set_verify_mode(ssl::verify_peer);
  return ctx;
}

// One synchronous request (setup only).
Json Call(const Daemon& d, ssl::context& tls, http::verb verb, const std::string& target,
          const Json& body) {
  net::io_context ioc;
  beast::ssl_stream<beast::tcp_stream> stream(ioc, tls);
  tcp::resolver resolver(ioc);
  beast::get_lowest_layer(stream).connect(resolver.resolve("127.0.0.1", std::to_string(d.port)));
  stream.handshake(ssl::stream_base::client);
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::authorization, "Bearer " + d.token);
  req.set(http::field::content_type, "application/json");
  if (!body.is_null()) req.body() = body.dump();
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  if (res.result_int() >= 300) {
    throw std::runtime_error(target + ": " + std::to_string(res.result_int()) + " " + res.body());
  }
  return Json::parse(res.body());
}

struct PhaseResult {
  std::string name;
  int requests = 0;
  int acknowledged = 0;
  int errors = 0;
  double seconds = 0;
  std::vector<double> latency_ms;
  std::string first_error;
};

// C connections, each sending its share of `count` submissions back to back.
class Load {
 public:
  Load(const Daemon& d, ssl::context& tls, int connections, int count, int gpus, double max_seconds,
       int name_base)
      : d_(d), tls_(tls), count_(count), gpus_(gpus), name_base_(name_base) {
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(max_seconds));
    for (int i = 0; i < connections; ++i) conns_.push_back(std::make_unique<Conn>(ioc_, tls_));
  }

  PhaseResult Run(const std::string& name) {
    PhaseResult r;
    r.name = name;
    const auto t0 = Clock::now();
    for (auto& c : conns_) Start(*c);
    ioc_.run();
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.requests = sent_;
    r.acknowledged = acked_;
    r.errors = errors_;
    r.latency_ms = std::move(latency_);
    r.first_error = first_error_;
    return r;
  }

 private:
  struct Conn {
    Conn(net::io_context& ioc, ssl::context& tls) : stream(ioc, tls) {}
    beast::ssl_stream<beast::tcp_stream> stream;
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    Clock::time_point sent;
  };

  void Start(Conn& c) {
    tcp::endpoint ep(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(d_.port));
    beast::get_lowest_layer(c.stream).async_connect(ep, [this, &c](beast::error_code ec) {
      if (ec) return Fail(c, ec.message());
      c.stream.async_handshake(ssl::stream_base::client, [this, &c](beast::error_code ec2) {
        if (ec2) return Fail(c, ec2.message());
        Next(c);
      });
    });
  }

  void Next(Conn& c) {
    if (sent_ >= count_ || Clock::now() > deadline_) return;
    const int i = sent_++;
    c.req = {http::verb::post, "/v1/jobs", 11};
    c.req.set(http::field::host, "127.0.0.1");
    c.req.set(http::field::authorization, "Bearer " + d_.token);
    c.req.set(http::field::content_type, "application/json");
    c.req.keep_alive(true);
    c.req.body() = "{\"spec\":{\"gpus\":" + std::to_string(gpus_) + ",\"name\":\"bench-" +
                   std::to_string(name_base_ + i) +
                   "\"},\"time_limit_s\":3600,\"command\":[\"true\"]}";
    c.req.prepare_payload();
    c.sent = Clock::now();
    http::async_write(c.stream, c.req, [this, &c](beast::error_code ec, size_t) {
      if (ec) return Fail(c, ec.message());
      c.res = {};
      http::async_read(c.stream, c.buf, c.res, [this, &c](beast::error_code ec2, size_t) {
        if (ec2) return Fail(c, ec2.message());
        latency_.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - c.sent).count());
        if (c.res.result_int() == 201) {
          ++acked_;
        } else {
          ++errors_;
          if (first_error_.empty())
            first_error_ = std::to_string(c.res.result_int()) + " " + c.res.body();
        }
        Next(c);
      });
    });
  }

  void Fail(Conn&, const std::string& what) {
    ++errors_;
    if (first_error_.empty()) first_error_ = what;
  }

  const Daemon& d_;
  ssl::context& tls_;
  net::io_context ioc_;
  std::vector<std::unique_ptr<Conn>> conns_;
  int count_, gpus_, name_base_;
  Clock::time_point deadline_;
  int sent_ = 0, acked_ = 0, errors_ = 0;
  std::vector<double> latency_;
  std::string first_error_;
};

// Clients that page through the event log back to back (GET /v1/events,
// 1,000 a page, from the start again at the end) until stopped.
class Scanners {
 public:
  Scanners(const Daemon& d, int count) : d_(d) {
    for (int i = 0; i < count; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Scanners() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int64_t pages() const { return pages_; }
  int64_t events() const { return events_; }

 private:
  void Loop() {
    ssl::context tls = MakeTls(d_);
    int64_t after = 0;
    while (!stop_) {
      try {
        const Json page =
            Call(d_, tls, http::verb::get,
                 "/v1/events?after=" + std::to_string(after) + "&limit=1000", nullptr);
        const size_t n = page["events"].size();
        pages_ += 1;
        events_ += static_cast<int64_t>(n);
        after = n == 0 ? 0 : page["scanned_to"].get<int64_t>();
      } catch (const std::exception&) {
        after = 0;
      }
    }
  }
  const Daemon& d_;
  std::atomic<bool> stop_ = false;
  std::atomic<int64_t> pages_ = 0, events_ = 0;
  std::vector<std::thread> threads_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_api - durable submissions/s through topo-scheduler's HTTPS API"};
  std::string daemon_bin = TOPO_SCHEDULER_BIN, topology = "meta-24k", out, extra_config_file;
  int connections = 64, requests = 20000, gpus = 8, scanners = 4;
  double max_seconds = 60;
  app.add_option("--daemon", daemon_bin, "topo-scheduler binary");
  app.add_option("--topology", topology, "reference topology (core generators)");
  app.add_option("--connections", connections, "concurrent keep-alive connections")
      ->check(CLI::Range(1, 4096));
  app.add_option("--requests", requests, "submissions per phase at most")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--gpus", gpus, "GPUs per submitted job")->check(CLI::Range(1, 64));
  app.add_option("--max-seconds", max_seconds, "time bound per phase")->check(CLI::Range(1, 3600));
  app.add_option("--scanners", scanners, "event-log readers during the last phase (0: skip it)")
      ->check(CLI::Range(0, 64));
  app.add_option("--out", out, "JSON results (default bench/results/api.json)");
  app.add_option("--extra-config", extra_config_file,
                 "a file of more daemon settings (bench/ha: the ha_* keys of HA mode)")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (out.empty()) out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/api.json";

  topo::core::Result<topo::core::Topology> topo = topo::core::GenerateTopology(topology);
  if (!topo.ok()) {
    std::cerr << "bench_api: " << topo.message() << "\n";
    return 1;
  }
  const topo::bench::MachineInfo machine = topo::bench::ReadMachine(TOPO_BENCH_SOURCE_DIR);
  Daemon d;
  if (!StartDaemon(daemon_bin, extra_config_file.empty() ? "" : Slurp(extra_config_file), d)) {
    StopDaemon(d);
    return 1;
  }
  int rc = 0;
  try {
    ssl::context tls = MakeTls(d);
    Call(d, tls, http::verb::put, "/v1/topology",
         Json{{"format", "json"}, {"content", topo::common::TopologyToJson(topo.value())}});
    std::vector<std::string> names;
    for (int n = 0; n < topo.value().node_count(); ++n) names.push_back(topo.value().node(n).name);
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ",") + n;
    Call(d, tls, http::verb::post, "/v1/nodes/resume", Json{{"nodes", all}});

    const int fill = std::min(requests, topo.value().total_gpus() / gpus);
    std::vector<PhaseResult> phases;
    phases.push_back(Load(d, tls, connections, fill, gpus, max_seconds, 0).Run("fill"));
    phases.push_back(Load(d, tls, connections, requests, gpus, max_seconds, fill).Run("queue"));
    int64_t scan_pages = 0, scan_events = 0;
    if (scanners > 0) {
      Scanners scan(d, scanners);
      phases.push_back(Load(d, tls, connections, requests, gpus, max_seconds, fill + requests)
                           .Run("queue+" + std::to_string(scanners) + " scanners"));
      scan.Stop();
      scan_pages = scan.pages();
      scan_events = scan.events();
    }
    const Json cluster = Call(d, tls, http::verb::get, "/v1/cluster", nullptr);

    std::printf("\nbench_api: %s (%d GPUs), %d connections, %d-GPU jobs, topo-scheduler at %s\n",
                topology.c_str(), topo.value().total_gpus(), connections, gpus, d.url.c_str());
    std::printf("commit %s%s, %s, %d CPUs (%s)\n\n", machine.git_commit.c_str(),
                machine.git_dirty ? " (dirty)" : "", machine.hostname.c_str(), machine.nproc,
                machine.cpu_model.c_str());
    std::printf(
        "| phase | submissions | acknowledged/s | p50 ms | p99 ms | p99.9 ms | errors | vs Slurm's "
        "documented 500/s |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    Json rows = Json::array();
    for (const PhaseResult& p : phases) {
      const double rate = p.seconds > 0 ? p.acknowledged / p.seconds : 0;
      const double p50 = Percentile(p.latency_ms, 0.50), p99 = Percentile(p.latency_ms, 0.99),
                   p999 = Percentile(p.latency_ms, 0.999);
      std::printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %d | %.1fx |\n", p.name.c_str(),
                  p.acknowledged, rate, p50, p99, p999, p.errors, rate / 500.0);
      if (!p.first_error.empty()) std::printf("  first error: %s\n", p.first_error.c_str());
      rows.push_back({{"phase", p.name},
                      {"requests", p.requests},
                      {"acknowledged", p.acknowledged},
                      {"errors", p.errors},
                      {"seconds", p.seconds},
                      {"acknowledged_per_s", rate},
                      {"p50_ms", p50},
                      {"p99_ms", p99},
                      {"p999_ms", p999}});
      if (p.errors > 0) rc = 1;
    }
    if (scanners > 0 && phases.size() == 3) {
      const double q99 = Percentile(phases[1].latency_ms, 0.99);
      const double s99 = Percentile(phases[2].latency_ms, 0.99);
      const double q50 = Percentile(phases[1].latency_ms, 0.50);
      const double s50 = Percentile(phases[2].latency_ms, 0.50);
      std::printf(
          "\nwith %d event-log scanners (%lld pages, %lld events read): submission p50 %.2fx, "
          "p99 %.2fx of the queue phase without them\n",
          scanners, static_cast<long long>(scan_pages), static_cast<long long>(scan_events),
          q50 > 0 ? s50 / q50 : 0.0, q99 > 0 ? s99 / q99 : 0.0);
    }
    std::printf("\ncluster after the run: %s\n", cluster["gpus"].dump().c_str());
    std::printf("goal: >= 5,000 acknowledged submissions/s (each 201 sent after its fsync)\n");
    Json result = {{"benchmark", "api"},
                   {"commit", machine.git_commit},
                   {"dirty", machine.git_dirty},
                   {"host", machine.hostname},
                   {"nproc", machine.nproc},
                   {"cpu", machine.cpu_model},
                   {"started_at", machine.started_at},
                   {"topology", topology},
                   {"connections", connections},
                   {"gpus_per_job", gpus},
                   {"scanners", scanners},
                   {"scanner_pages", scan_pages},
                   {"scanner_events", scan_events},
                   {"phases", rows}};
    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
    std::ofstream(out) << result.dump(2) << "\n";
    std::printf("results: %s\n", out.c_str());
  } catch (const std::exception& e) {
    std::cerr << "bench_api: " << e.what() << "\n" << Slurp(d.dir + "/daemon.log");
    rc = 1;
  }
  StopDaemon(d);
  return rc;
}
