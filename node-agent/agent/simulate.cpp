// topo-agent --simulate N (simulate.hpp): N real AgentCores over simulated
// nodes, one process, one event loop.

#include "simulate.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <utility>  // before Boost 1.74's awaitable.hpp, which needs std::exchange

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "agent_core.hpp"
#include "connection.hpp"
#include "sim_gpus.hpp"
#include "sim_runner.hpp"
#include "simulate_cert.hpp"
#include "topo/common/version.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Json = nlohmann::json;
using core::Result;
using core::Status;
using std::chrono::milliseconds;

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Log(const std::string& msg) {
  std::fprintf(stderr, "topo-agent --simulate: %s\n", msg.c_str());
  std::fflush(stderr);
}

class SteadyClock final : public AgentClock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class Simulator;

// One simulated node: the real agent over a simulated runner and GPUs.
struct SimNode {
  SimNode(Simulator& sim, std::string node_name, int index, CertPtr node_cert);
  std::string name;
  CertPtr cert;
  SimGpus gpus;
  SimRunner runner;
  AgentConnection conn;
  AgentCore core;
};

class Simulator final : public AgentLog,
                        public AgentObserver,
                        public ConnectionEvents,
                        public SimHost {
 public:
  explicit Simulator(const SimulateOptions& o) : o_(o), tls_(ssl::context::tls_client) {}
  int Run();

  // AgentLog: the agents' warnings (refusals, launch failures, messages
  // the protocol does not allow); their info lines would be thousands.
  void Line(const std::string& node, LogLevel level, const std::string& text) override {
    if (level == LogLevel::kWarning) Log(node + ": " + text);
  }
  // AgentObserver
  void OnSchedulerMessage(const std::string& node, const proto::SchedulerMessage& m) override;
  // ConnectionEvents
  void OnLost(const AgentConnection& connection, const std::string& why) override {
    Emit({{"ev", "lost"},
          {"node", connection.core()->node()},
          {"why", why},
          {"killed", connection.killed()}});
  }
  // SimHost
  void WakeAt(int64_t at_ms, int node_index) override;
  void Emit(Json event) override;

 private:
  friend struct SimNode;

  awaitable<void> WakeLoop();
  awaitable<void> ControlLoop();
  awaitable<void> StatsLoop();
  std::string Command(const std::string& line);
  std::string Fault(SimNode& n, const std::string& cmd, std::istringstream& in);
  Json Counters() const;
  void Shutdown();

  SimulateOptions o_;
  net::io_context ioc_;
  ssl::context tls_;
  SteadyClock clock_;
  CertMinter minter_;
  AgentCoreOptions core_options_;
  SimRunnerSettings runner_settings_;
  std::unique_ptr<ConnectionShared> shared_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::unordered_map<std::string, SimNode*> by_name_;
  // Node wake-ups the runners asked for (AgentClock ms, node index).
  using Wake = std::pair<int64_t, int>;
  std::priority_queue<Wake, std::vector<Wake>, std::greater<Wake>> wakes_;
  int64_t armed_at_ = INT64_MAX;
  net::steady_timer wake_timer_{ioc_};
  net::steady_timer stats_timer_{ioc_};
  net::posix::stream_descriptor control_{ioc_};
  net::signal_set stop_signals_{ioc_, SIGTERM, SIGINT};
  bool stopping_ = false;
  int64_t refusals_ = 0;
};

SimNode::SimNode(Simulator& sim, std::string node_name, int index, CertPtr node_cert)
    : name(std::move(node_name)),
      cert(std::move(node_cert)),
      gpus(name, sim.o_.gpus, sim.o_.gpu_model),
      runner(name, index, sim.runner_settings_, sim.clock_, sim),
      conn(*sim.shared_),
      core(name, sim.core_options_, runner, gpus, conn, sim.clock_, sim, &sim) {
  conn.SetIdentity(cert.get(), sim.minter_.node_key());
}

// ---------------------------------------------------------------- setup

int Simulator::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  ConnectionSettings cs;
  core::Result<std::vector<ConnectionTarget>> targets = ParseServerList(o_.server_url);
  if (!targets.ok()) {
    Log(targets.message());
    return 2;
  }
  cs.targets = std::move(targets).value();
  cs.endpoint_file = o_.endpoint_file;
  cs.endpoint_text = o_.server_url;
  const std::vector<std::string> names = SimulatedNodeNames(o_);
  if (names.empty()) {
    Log("no node names (--simulate N with --node-prefix, or --simulate-nodes FILE)");
    return 2;
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &lim);
  }
  const uint64_t need = names.size() + 64;  // one socket per node
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur < need) {
    Log(std::to_string(names.size()) + " nodes need " + std::to_string(need) +
        " file descriptors; RLIMIT_NOFILE allows " + std::to_string(lim.rlim_cur) +
        " (its hard limit): run several simulator processes with --node-first");
    return 2;
  }
  if (Status s = minter_.Load(o_.ca_file, o_.ca_key_file); !s.ok()) {
    Log(s.message());
    return 1;
  }
  boost::system::error_code ec;
  tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  tls_.load_verify_file(o_.ca_file, ec);
  if (ec) {
    Log("--ca " + o_.ca_file + ": " + ec.message());
    return 1;
  }
  tls_.set_verify_mode(ssl::verify_peer);
  // Idle connections give their TLS buffers back: thousands sit idle between beats.
  SSL_CTX_set_mode(tls_.native_handle(), SSL_MODE_RELEASE_BUFFERS);
  tcp::resolver resolver(ioc_);
  for (ConnectionTarget& t : cs.targets) {
    auto resolved = resolver.resolve(t.url.host, t.url.port, ec);
    if (ec || resolved.empty()) {
      Log("cannot resolve " + t.url.host + ":" + t.url.port + ": " + ec.message());
      return 1;
    }
    t.endpoint = resolved.begin()->endpoint();
  }
  cs.connect_timeout = std::chrono::seconds(30);  // thousands of handshakes queue up
  cs.idle_timeout = milliseconds(0);
  cs.first_beat_spread_ms = 999;
  cs.max_connecting = o_.max_connecting;

  core_options_.addr = o_.addr;
  core_options_.agent_version = std::string("topo-agent ") + kVersion + " (simulated)";
  core_options_.job_command = "(simulated: no process runs)";
  core_options_.heartbeat_ms = o_.heartbeat_ms;
  core_options_.drain_checkpoint_ms = o_.drain_checkpoint_ms;
  runner_settings_ = SimRunnerSettings{o_.step_ms, o_.checkpoint_every_ms, o_.run_ms};
  const uint64_t seed =
      o_.seed != 0 ? o_.seed : static_cast<uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull;
  shared_ = std::make_unique<ConnectionShared>(ioc_, tls_, cs, *this, seed);
  shared_->events = this;

  const auto t0 = std::chrono::steady_clock::now();
  nodes_.reserve(names.size());
  for (const std::string& name : names) {
    Result<CertPtr> cert = minter_.Mint(name);
    if (!cert.ok()) {
      Log(cert.message());
      return 1;
    }
    auto n = std::make_unique<SimNode>(*this, name, static_cast<int>(nodes_.size()),
                                       std::move(cert).value());
    if (!by_name_.emplace(name, n.get()).second) {
      Log("node " + name + " is named twice");
      return 2;
    }
    nodes_.push_back(std::move(n));
  }
  const double mint_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Log(std::to_string(nodes_.size()) + " simulated nodes (" + nodes_.front()->name + " .. " +
      nodes_.back()->name + "), certificates minted in " + std::to_string(mint_s) +
      " s; scheduler " + o_.server_url);

  stop_signals_.async_wait([this](const boost::system::error_code& e, int) {
    if (!e) Shutdown();
  });
  for (auto& n : nodes_) n->conn.Start(n->core);
  net::co_spawn(ioc_, WakeLoop(), net::detached);
  net::co_spawn(ioc_, ControlLoop(), net::detached);
  if (o_.stats_every_s > 0) net::co_spawn(ioc_, StatsLoop(), net::detached);
  Emit({{"ev", "ready"}, {"nodes", nodes_.size()}, {"mint_s", mint_s}});
  ioc_.run();
  // Let every node's coroutines see `stopping` and end (Shutdown closed the
  // sockets and cancelled the timers) before what they use is destroyed.
  ioc_.restart();
  ioc_.run_for(std::chrono::seconds(5));
  Log("exiting: " + Counters().dump());
  return 0;
}

void Simulator::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  shared_->stopping = true;
  for (auto& n : nodes_) n->conn.Close();
  boost::system::error_code ec;
  wake_timer_.cancel();
  stats_timer_.cancel();
  control_.close(ec);
  stop_signals_.cancel(ec);
  ioc_.stop();
}

void Simulator::Emit(Json j) {
  j["t"] = WallMs();
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

Json Simulator::Counters() const {
  int connected = 0, killed = 0, hung = 0;
  for (const auto& n : nodes_) {
    connected += n->conn.connected();
    killed += n->conn.killed();
    hung += n->conn.hung();
  }
  const ConnectionStats& s = shared_->stats;
  return {{"nodes", nodes_.size()},
          {"registered", s.registered},
          {"connected", connected},
          {"connecting", shared_->connecting},
          {"queued", shared_->waiting.size()},
          {"killed", killed},
          {"hung", hung},
          {"heartbeats", s.heartbeats},
          {"messages_in", s.messages_in},
          {"sessions", s.sessions},
          {"losses", s.losses},
          {"refusals", refusals_},
          {"connect_failures", s.connect_failures}};
}

// ---------------------------------------------------------------- events

void Simulator::OnSchedulerMessage(const std::string& node, const proto::SchedulerMessage& m) {
  if (const auto* r = std::get_if<proto::Registered>(&m)) {
    (void)r;
    if (o_.up_events) Emit({{"ev", "up"}, {"node", node}});
  } else if (const auto* s = std::get_if<proto::Stop>(&m)) {
    auto it = by_name_.find(node);
    const bool had =
        it != by_name_.end() && it->second->runner.RestartCountOf(std::to_string(s->job));
    Emit({{"ev", "stop"}, {"node", node}, {"job", s->job}, {"reason", s->reason}, {"had", had}});
  } else if (const auto* c = std::get_if<proto::CheckpointRequest>(&m)) {
    Emit({{"ev", "checkpoint_request"}, {"node", node}, {"job", c->job}});
  } else if (const auto* d = std::get_if<proto::Drain>(&m)) {
    Emit({{"ev", "drain"},
          {"node", node},
          {"mode", d->mode == proto::DrainMode::kImmediate ? "immediate" : "graceful"}});
  } else if (const auto* e = std::get_if<proto::Error>(&m)) {
    ++refusals_;
    Emit({{"ev", "refused"},
          {"node", node},
          {"message", e->message},
          {"field", e->field},
          {"refused", e->refused}});
  }
}

void Simulator::WakeAt(int64_t at_ms, int node_index) {
  wakes_.push({at_ms, node_index});
  if (at_ms < armed_at_) wake_timer_.cancel();  // the loop re-arms earlier
}

awaitable<void> Simulator::WakeLoop() {
  while (!stopping_) {
    if (wakes_.empty()) {
      armed_at_ = INT64_MAX;
      wake_timer_.expires_at(net::steady_timer::time_point::max());
    } else {
      armed_at_ = wakes_.top().first;
      wake_timer_.expires_at(net::steady_timer::time_point(milliseconds(armed_at_)));
    }
    boost::system::error_code ec;
    co_await wake_timer_.async_wait(net::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    armed_at_ = INT64_MAX;
    const int64_t now = clock_.NowMs();
    while (!wakes_.empty() && wakes_.top().first <= now) {
      const int index = wakes_.top().second;
      wakes_.pop();
      nodes_[static_cast<size_t>(index)]->core.Tick();
    }
  }
}

// ---------------------------------------------------------------- control

std::string Simulator::Fault(SimNode& n, const std::string& cmd, std::istringstream& in) {
  int gpu = 0;
  std::string kind = "xid";
  int64_t code = 0;
  if (!(in >> gpu)) return "usage: xid NODE GPU CODE | gpu NODE GPU KIND CODE";
  if (cmd == "gpu" && !(in >> kind)) return "usage: gpu NODE GPU KIND CODE";
  if (!(in >> code)) code = 0;
  using K = gpu::HealthEventKind;
  gpu::InjectCommand c{K::kXid, gpu, code, 0};
  if (kind == "xid") {
    if (code < 0) return "an XID code is not negative";
  } else if (kind == "ecc_single_bit" || kind == "ecc_double_bit") {
    if (code < 0) return "an ECC count is not negative";
    c = gpu::InjectCommand{K::kEccSingleBit, gpu, kind == "ecc_single_bit" ? code : 0,
                           kind == "ecc_double_bit" ? code : 0};
  } else if (kind == "thermal") {
    c = gpu::InjectCommand{K::kThermal, gpu, code != 0 ? 1 : 0, 0};
  } else if (kind == "off_bus") {
    c = gpu::InjectCommand{K::kOffBus, gpu, 0, 0};
  } else if (kind == "cleared") {
    c = gpu::InjectCommand{K::kCleared, gpu, 0, 0};
  } else {
    return "unknown GPU event kind \"" + kind +
           "\": xid, ecc_single_bit, ecc_double_bit, thermal, off_bus or cleared";
  }
  if (Status s = n.gpus.Inject(c); !s.ok()) return s.message();
  n.core.PollGpus();
  return "";
}

std::string Simulator::Command(const std::string& line) {
  std::istringstream in(line);
  std::string cmd, name;
  in >> cmd;
  if (cmd.empty()) return "";
  if (cmd == "status") {
    Json s = Counters();
    s["ev"] = "status";
    Emit(s);
    return "";
  }
  if (cmd == "quit") {
    Shutdown();
    return "";
  }
  if (cmd == "checkpoint") {
    int64_t job = 0;
    if (!(in >> job)) return "usage: checkpoint JOB";
    for (auto& n : nodes_) {
      if (n->runner.HoldsRankZero(job) && n->core.registered() && !n->conn.hung()) {
        if (Status s = n->runner.CheckpointNow(job); !s.ok()) return s.message();
        n->core.PollRunner();
        return "";
      }
    }
    return "no registered node runs rank 0 of job " + std::to_string(job);
  }
  in >> name;
  auto found = by_name_.find(name);
  if (found == by_name_.end()) return "no simulated node named \"" + name + "\"";
  SimNode& n = *found->second;
  if (cmd == "kill") {
    n.conn.Kill();
    n.runner.Reset();
    n.gpus.Reset();
    n.core.Reset();
    return "";
  }
  if (cmd == "hang") {
    n.conn.Hang();
    return "";
  }
  if (cmd == "revive") {
    if (n.conn.killed() || n.conn.hung()) {
      n.core.Reset();
      n.gpus.Reset();
    }
    n.runner.Reset();
    n.conn.Revive();
    return "";
  }
  if (!n.core.registered() || n.conn.hung()) return "node " + name + " is not registered";
  if (cmd == "xid" || cmd == "gpu") return Fault(n, cmd, in);
  if (cmd == "exit") {
    int64_t job = 0;
    int rank = 0, code = 0;
    if (!(in >> job >> rank >> code)) return "usage: exit NODE JOB RANK CODE";
    if (Status s = n.runner.Exit(job, rank, code); !s.ok()) return s.message();
    n.core.Tick();
    return "";
  }
  return "unknown command \"" + cmd + "\"";
}

awaitable<void> Simulator::ControlLoop() {
  const int fd = ::dup(STDIN_FILENO);
  if (fd < 0) co_return;
  boost::system::error_code ec;
  control_.assign(fd, ec);
  if (ec) {
    ::close(fd);
    Log("no control channel on stdin: " + ec.message());
    co_return;
  }
  std::string buffer;
  while (!stopping_) {
    const size_t n = co_await net::async_read_until(control_, net::dynamic_buffer(buffer), '\n',
                                                    net::redirect_error(use_awaitable, ec));
    if (ec) {
      // EOF (or stdin is not a pipe or terminal): run without control.
      if (ec != net::error::eof && !stopping_) Log("control channel on stdin: " + ec.message());
      co_return;
    }
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const int64_t received = WallMs();  // a fault's time: before it is carried out
    const std::string error = Command(line);
    if (line == "status" || line == "quit") continue;
    Json ack = {{"ev", "ack"}, {"cmd", line}, {"t_cmd", received}};
    if (!error.empty()) ack["error"] = error;
    Emit(ack);
  }
}

awaitable<void> Simulator::StatsLoop() {
  while (!stopping_) {
    stats_timer_.expires_after(std::chrono::seconds(o_.stats_every_s));
    boost::system::error_code ec;
    co_await stats_timer_.async_wait(net::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    Log(Counters().dump());
  }
}

}  // namespace

std::vector<std::string> SimulatedNodeNames(const SimulateOptions& o) {
  std::vector<std::string> out;
  if (!o.names.empty()) {
    for (int i = o.first_index;
         i < static_cast<int>(o.names.size()) && static_cast<int>(out.size()) < o.nodes; ++i) {
      out.push_back(o.names[i]);
    }
    return out;
  }
  for (int i = 0; i < o.nodes; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*d", o.node_width, o.first_index + i);
    out.push_back(o.node_prefix + buf);
  }
  return out;
}

int RunSimulation(const SimulateOptions& options) {
  Simulator sim(options);
  return sim.Run();
}

}  // namespace topo::agent
