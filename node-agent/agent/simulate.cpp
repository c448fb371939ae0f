// topo-agent --simulate N (simulate.hpp): many protocol clients, no ranks.

#include "simulate.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <utility>  // before Boost 1.74's awaitable.hpp, which needs std::exchange

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "agent.hpp"
#include "simulate_cert.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Json = nlohmann::json;
using Ws = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;
using core::Result;
using core::Status;
using std::chrono::milliseconds;

constexpr const char* kSimVersion = "topo-agent 0.1.0 (simulated)";

int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Log(const std::string& msg) {
  std::fprintf(stderr, "topo-agent --simulate: %s\n", msg.c_str());
  std::fflush(stderr);
}

// ---------------------------------------------------------------- state

struct SimJob {
  int restart_count = 0;
  int64_t base_step = 0;  // the step it (re)started from
  int64_t started_ms = 0;
  int64_t last_ckpt_ms = 0;
  int64_t last_step = -1;
  std::vector<int> ranks;  // global ranks on this node
  bool rank0 = false;
  std::shared_ptr<net::steady_timer> finish;  // run_ms
};

struct Node {
  explicit Node(net::io_context& ioc) : hb_timer(ioc), wait_timer(ioc) {}
  std::string name;
  CertPtr cert;
  std::shared_ptr<Ws> ws;
  uint64_t gen = 0;  // connection generation: callbacks of an old one do nothing
  std::deque<std::shared_ptr<std::string>> outbox;
  bool writing = false;
  bool connected = false;   // WebSocket open
  bool registered = false;  // `registered` received on this connection
  bool killed = false;
  bool hung = false;
  bool granted = false;  // a connect slot was handed over while queued
  int heartbeat_ms = 1000;
  int64_t seq = 0;
  net::steady_timer hb_timer;
  net::steady_timer wait_timer;  // backoff, the connect queue, a killed node's revive
  std::map<int64_t, SimJob> jobs;
};

class Simulator {
 public:
  explicit Simulator(const SimulateOptions& o) : o_(o), tls_(ssl::context::tls_client) {
    rng_.seed(o.seed != 0 ? o.seed : static_cast<uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull);
  }
  int Run();

 private:
  struct SlotGuard {
    Simulator* sim;
    bool held = true;
    void Release() {
      // After a shutdown the io_context destroys suspended coroutines, and
      // with them guards whose queue may already be gone.
      if (held && !sim->stopping_) sim->ReleaseConnectSlot();
      held = false;
    }
    ~SlotGuard() { Release(); }
  };

  awaitable<void> NodeLoop(Node& n);
  awaitable<void> Session(Node& n);
  awaitable<void> HeartbeatLoop(Node& n);
  awaitable<void> AcquireConnectSlot(Node& n);
  void ReleaseConnectSlot();
  awaitable<void> ControlLoop();
  awaitable<void> StatsLoop();
  void Disconnected(Node& n);
  void Send(Node& n, std::string text);
  void WriteNext(Node& n);
  void HandleMessage(Node& n, const std::string& text);
  void HandleStart(Node& n, const Json& j);
  void ReportCheckpoint(Node& n, int64_t job, SimJob& s);
  void Finish(Node& n, int64_t job, int restart_count);
  void DropJobs(Node& n);
  std::string Command(const std::string& line);
  void Emit(Json j);
  Json Counters() const;
  void Shutdown();

  SimulateOptions o_;
  net::io_context ioc_;
  ssl::context tls_;
  ServerUrl url_;
  tcp::endpoint endpoint_;
  CertMinter minter_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, Node*> by_name_;
  std::deque<Node*> waitq_;
  int connecting_ = 0;
  bool stopping_ = false;
  // Counters.
  int registered_ = 0;
  int64_t heartbeats_ = 0, messages_in_ = 0, sessions_ = 0, losses_ = 0, refusals_ = 0;
  int64_t connect_failures_ = 0;
};

// ---------------------------------------------------------------- setup

int Simulator::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  if (!ParseServerUrl(o_.server_url, &url_)) {
    Log("--server " + o_.server_url + ": expected wss://HOST:PORT/PATH");
    return 2;
  }
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
  const uint64_t need = names.size() + 64;
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
  auto resolved = resolver.resolve(url_.host, url_.port, ec);
  if (ec || resolved.empty()) {
    Log("cannot resolve " + url_.host + ":" + url_.port + ": " + ec.message());
    return 1;
  }
  endpoint_ = resolved.begin()->endpoint();

  const auto t0 = std::chrono::steady_clock::now();
  nodes_.reserve(names.size());
  for (const std::string& name : names) {
    auto n = std::make_unique<Node>(ioc_);
    n->name = name;
    Result<CertPtr> cert = minter_.Mint(name);
    if (!cert.ok()) {
      Log(cert.message());
      return 1;
    }
    n->cert = std::move(cert).value();
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

  net::signal_set stop_signals(ioc_, SIGTERM, SIGINT);
  stop_signals.async_wait([this](const boost::system::error_code& e, int) {
    if (!e) Shutdown();
  });
  for (auto& n : nodes_) {
    net::co_spawn(ioc_, NodeLoop(*n), net::detached);
    net::co_spawn(ioc_, HeartbeatLoop(*n), net::detached);
  }
  net::co_spawn(ioc_, ControlLoop(), net::detached);
  if (o_.stats_every_s > 0) net::co_spawn(ioc_, StatsLoop(), net::detached);
  Emit({{"ev", "ready"}, {"nodes", nodes_.size()}, {"mint_s", mint_s}});
  ioc_.run();
  // Let every node's coroutines see stopping_ and end (sockets closed and
  // timers cancelled by Shutdown) before the members they use are destroyed.
  ioc_.restart();
  ioc_.poll();
  Log("exiting: " + Counters().dump());
  return 0;
}

void Simulator::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  for (auto& n : nodes_) {
    if (n->ws) {
      boost::system::error_code ec;
      beast::get_lowest_layer(*n->ws).socket().close(ec);
    }
    DropJobs(*n);
    n->hb_timer.cancel();
    n->wait_timer.cancel();
  }
  ioc_.stop();
}

void Simulator::Emit(Json j) {
  j["t"] = NowMs();
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

Json Simulator::Counters() const {
  int connected = 0, killed = 0, hung = 0;
  for (const auto& n : nodes_) {
    connected += n->connected;
    killed += n->killed;
    hung += n->hung;
  }
  return {{"nodes", nodes_.size()},
          {"registered", registered_},
          {"connected", connected},
          {"connecting", connecting_},
          {"queued", waitq_.size()},
          {"killed", killed},
          {"hung", hung},
          {"heartbeats", heartbeats_},
          {"messages_in", messages_in_},
          {"sessions", sessions_},
          {"losses", losses_},
          {"refusals", refusals_},
          {"connect_failures", connect_failures_}};
}

// ---------------------------------------------------------------- connections

awaitable<void> Simulator::AcquireConnectSlot(Node& n) {
  if (connecting_ < o_.max_connecting && waitq_.empty()) {
    ++connecting_;
    co_return;
  }
  n.granted = false;
  waitq_.push_back(&n);
  while (!n.granted && !stopping_) {
    n.wait_timer.expires_at(net::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await n.wait_timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

void Simulator::ReleaseConnectSlot() {
  --connecting_;
  while (!waitq_.empty() && connecting_ < o_.max_connecting) {
    Node* w = waitq_.front();
    waitq_.pop_front();
    ++connecting_;
    w->granted = true;
    w->wait_timer.cancel();
  }
}

awaitable<void> Simulator::NodeLoop(Node& n) {
  int delay_ms = 100;
  while (!stopping_) {
    if (n.killed) {
      n.wait_timer.expires_at(net::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await n.wait_timer.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    std::string why = "the connection closed";
    try {
      co_await Session(n);
    } catch (const boost::system::system_error& e) {
      why = e.code().message();
    } catch (const std::exception& e) {
      why = e.what();
    }
    const bool was_registered = n.registered;
    if (!n.connected && !n.killed && !stopping_) ++connect_failures_;
    Disconnected(n);
    if (stopping_) break;
    if (was_registered) {
      ++losses_;
      delay_ms = 100;
      Emit({{"ev", "lost"}, {"node", n.name}, {"why", why}, {"killed", n.killed}});
    }
    if (n.killed) continue;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    n.wait_timer.expires_after(milliseconds(static_cast<int>(delay_ms * jitter(rng_))));
    delay_ms = std::min(delay_ms * 2, 5000);
    boost::system::error_code ec;
    co_await n.wait_timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Simulator::Session(Node& n) {
  co_await AcquireConnectSlot(n);
  SlotGuard slot{this};
  if (n.killed || stopping_) co_return;
  auto ws = std::make_shared<Ws>(ioc_, tls_);
  SSL* ssl = ws->next_layer().native_handle();
  if (SSL_use_certificate(ssl, n.cert.get()) != 1 ||
      SSL_use_PrivateKey(ssl, minter_.node_key()) != 1) {
    throw std::runtime_error("cannot use the minted certificate of " + n.name);
  }
  n.ws = ws;
  beast::get_lowest_layer(*ws).expires_after(std::chrono::seconds(30));
  co_await beast::get_lowest_layer(*ws).async_connect(endpoint_, use_awaitable);
  ws->next_layer().set_verify_callback(ssl::host_name_verification(url_.host));
  co_await ws->next_layer().async_handshake(ssl::stream_base::client, use_awaitable);
  beast::get_lowest_layer(*ws).expires_never();
  auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::client);
  timeouts.handshake_timeout = std::chrono::seconds(30);
  ws->set_option(timeouts);
  ws->read_message_max(1u << 20);
  co_await ws->async_handshake(url_.host + ":" + url_.port, url_.path, use_awaitable);
  slot.Release();
  ++n.gen;
  ++sessions_;
  n.connected = true;
  Json gpus = Json::array();
  for (int g = 0; g < o_.gpus; ++g) {
    gpus.push_back({{"index", g},
                    {"model", o_.gpu_model},
                    {"uuid", "GPU-sim-" + n.name + "-" + std::to_string(g)},
                    {"memory_mb", 81559}});
  }
  Send(n, Json{{"type", "register"},
               {"node", n.name},
               {"addr", o_.addr},
               {"gpus", gpus},
               {"ranks", Json::array()},
               {"agent", kSimVersion}}
              .dump());
  beast::flat_buffer buffer;
  while (!stopping_) {
    co_await ws->async_read(buffer, use_awaitable);
    ++messages_in_;
    std::string text = beast::buffers_to_string(buffer.data());
    buffer.consume(buffer.size());
    if (!n.hung) HandleMessage(n, text);
  }
}

void Simulator::Disconnected(Node& n) {
  if (n.ws) {
    boost::system::error_code ec;
    beast::get_lowest_layer(*n.ws).socket().close(ec);
  }
  n.ws.reset();
  ++n.gen;
  n.outbox.clear();
  n.writing = false;
  n.connected = false;
  if (n.registered) --registered_;
  n.registered = false;
}

void Simulator::Send(Node& n, std::string text) {
  if (!n.connected || n.hung) return;
  n.outbox.push_back(std::make_shared<std::string>(std::move(text)));
  if (!n.writing) WriteNext(n);
}

void Simulator::WriteNext(Node& n) {
  if (n.outbox.empty() || !n.ws) {
    n.writing = false;
    return;
  }
  n.writing = true;
  auto ws = n.ws;
  auto text = n.outbox.front();
  n.outbox.pop_front();
  const uint64_t gen = n.gen;
  ws->text(true);
  ws->async_write(net::buffer(*text), [this, &n, ws, text, gen](beast::error_code ec, size_t) {
    if (gen != n.gen) return;
    if (ec) {
      n.writing = false;
      boost::system::error_code ignored;
      beast::get_lowest_layer(*ws).socket().close(ignored);  // the read loop ends
      return;
    }
    WriteNext(n);
  });
}

awaitable<void> Simulator::HeartbeatLoop(Node& n) {
  // Spread the nodes' beats over the interval.
  std::uniform_int_distribution<int> phase(0, 999);
  n.hb_timer.expires_after(milliseconds(phase(rng_)));
  boost::system::error_code ec;
  co_await n.hb_timer.async_wait(net::redirect_error(use_awaitable, ec));
  while (!stopping_) {
    if (n.registered && !n.hung) {
      Send(n, "{\"type\":\"heartbeat\",\"seq\":" + std::to_string(++n.seq) + "}");
      ++heartbeats_;
      if (o_.checkpoint_every_ms > 0) {
        const int64_t now = NowMs();
        for (auto& [id, job] : n.jobs) {
          if (job.rank0 && now - job.last_ckpt_ms >= o_.checkpoint_every_ms) {
            ReportCheckpoint(n, id, job);
          }
        }
      }
    }
    n.hb_timer.expires_after(milliseconds(n.heartbeat_ms));
    co_await n.hb_timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

// ---------------------------------------------------------------- messages

void Simulator::HandleMessage(Node& n, const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return;
  const std::string type = j["type"];
  try {
    if (type == "registered") {
      if (!n.registered) ++registered_;
      n.registered = true;
      n.heartbeat_ms = o_.heartbeat_ms > 0 ? o_.heartbeat_ms
                                           : std::max(10, j.value("heartbeat_interval_ms", 1000));
      std::set<int64_t> keep;
      for (const Json& k : j.value("keep", Json::array())) {
        if (k.is_number_integer()) keep.insert(k.get<int64_t>());
      }
      for (auto it = n.jobs.begin(); it != n.jobs.end();) {
        if (keep.count(it->first)) {
          ++it;
          continue;
        }
        if (it->second.finish) it->second.finish->cancel();
        it = n.jobs.erase(it);
      }
      if (o_.up_events) Emit({{"ev", "up"}, {"node", n.name}});
      n.hb_timer.cancel();  // beat now, then at the interval
    } else if (type == "start") {
      HandleStart(n, j);
    } else if (type == "stop") {
      const int64_t id = j.at("job").get<int64_t>();
      auto it = n.jobs.find(id);
      const bool had = it != n.jobs.end();
      if (had) {
        if (it->second.finish) it->second.finish->cancel();
        n.jobs.erase(it);
      }
      Emit({{"ev", "stop"},
            {"node", n.name},
            {"job", id},
            {"reason", j.value("reason", "")},
            {"had", had}});
    } else if (type == "checkpoint") {
      const int64_t id = j.at("job").get<int64_t>();
      Emit({{"ev", "checkpoint_request"}, {"node", n.name}, {"job", id}});
      auto it = n.jobs.find(id);
      if (it != n.jobs.end() && it->second.rank0) ReportCheckpoint(n, id, it->second);
    } else if (type == "drain") {
      Emit({{"ev", "drain"}, {"node", n.name}, {"mode", j.value("mode", "graceful")}});
      if (j.value("mode", "graceful") == "graceful") {
        for (auto& [id, job] : n.jobs) {
          if (job.rank0) ReportCheckpoint(n, id, job);
        }
      }
      n.jobs.clear();
      Send(n, R"({"type":"drained"})");
    } else if (type == "logs") {
      // No process runs here: a one-line synthetic log per rank.
      const int64_t id = j.value("job", int64_t{0});
      const int rank = j.value("rank", 0);
      Json answer = {{"type", "logs"}, {"req", j.value("req", int64_t{0})}};
      auto it = n.jobs.find(id);
      const std::string log =
          "simulated node " + n.name + ": job " + std::to_string(id) + " rank " +
          std::to_string(rank) +
          (it != n.jobs.end() ? " restart " + std::to_string(it->second.restart_count)
                              : std::string(" (not running here now)")) +
          "; no process runs\n";
      const int64_t offset =
          std::clamp<int64_t>(j.value("offset", int64_t{0}), 0, static_cast<int64_t>(log.size()));
      const int64_t max = std::max<int64_t>(0, j.value("max", int64_t{65536}));
      const std::string data = log.substr(static_cast<size_t>(offset), static_cast<size_t>(max));
      answer["offset"] = offset;
      answer["next_offset"] = offset + static_cast<int64_t>(data.size());
      answer["size"] = log.size();
      answer["data"] = data;
      Send(n, answer.dump());
    } else if (type == "error") {
      ++refusals_;
      Emit({{"ev", "refused"}, {"node", n.name}, {"message", j.value("message", "")}});
    }
  } catch (const std::exception& e) {
    Log(n.name + ": bad " + type + " message (" + e.what() + "): " + text.substr(0, 200));
  }
}

void Simulator::HandleStart(Node& n, const Json& j) {
  const int64_t id = j.at("job").get<int64_t>();
  SimJob s;
  s.restart_count = j.value("restart_count", 0);
  const int64_t step = j.value("checkpoint_step", int64_t{-1});
  s.base_step = std::max<int64_t>(0, step);
  s.last_step = step;
  s.started_ms = NowMs();
  s.last_ckpt_ms = s.started_ms;
  for (const Json& r : j.at("ranks")) {
    s.ranks.push_back(r.at("rank").get<int>());
    s.rank0 |= s.ranks.back() == 0;
  }
  if (o_.run_ms > 0) {
    s.finish = std::make_shared<net::steady_timer>(ioc_, milliseconds(o_.run_ms));
    const int restart = s.restart_count;
    s.finish->async_wait([this, &n, id, restart](const boost::system::error_code& ec) {
      if (!ec) Finish(n, id, restart);
    });
  }
  Emit({{"ev", "start"},
        {"node", n.name},
        {"job", id},
        {"restart_count", s.restart_count},
        {"checkpoint_step", step},
        {"ranks", s.ranks.size()},
        {"world_size", j.value("world_size", 0)}});
  n.jobs[id] = std::move(s);  // a restart replaces the earlier run
}

void Simulator::ReportCheckpoint(Node& n, int64_t job, SimJob& s) {
  const int64_t now = NowMs();
  const int64_t step =
      std::max(s.base_step + (now - s.started_ms) / std::max(1, o_.step_ms), s.last_step + 1);
  s.last_step = step;
  s.last_ckpt_ms = now;
  Send(n,
       Json{{"type", "checkpoint"}, {"job", job}, {"step", step}, {"tier", "persistent"}}.dump());
  Emit({{"ev", "ckpt"},
        {"node", n.name},
        {"job", job},
        {"step", step},
        {"restart_count", s.restart_count}});
}

void Simulator::Finish(Node& n, int64_t job, int restart_count) {
  auto it = n.jobs.find(job);
  if (it == n.jobs.end() || it->second.restart_count != restart_count) return;
  for (int r : it->second.ranks) {
    Send(n, Json{{"type", "rank_exited"},
                 {"job", job},
                 {"rank", r},
                 {"restart_count", restart_count},
                 {"exit_code", 0},
                 {"signal", 0}}
                .dump());
  }
  Emit({{"ev", "finished"}, {"node", n.name}, {"job", job}, {"restart_count", restart_count}});
  n.jobs.erase(it);
}

void Simulator::DropJobs(Node& n) {
  for (auto& [id, job] : n.jobs) {
    if (job.finish) job.finish->cancel();
  }
  n.jobs.clear();
}

// ---------------------------------------------------------------- control

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
      auto it = n->jobs.find(job);
      if (it != n->jobs.end() && it->second.rank0 && n->registered) {
        ReportCheckpoint(*n, job, it->second);
        return "";
      }
    }
    return "no registered node runs rank 0 of job " + std::to_string(job);
  }
  in >> name;
  auto found = by_name_.find(name);
  if (found == by_name_.end()) return "no simulated node named \"" + name + "\"";
  Node& n = *found->second;
  if (cmd == "kill") {
    n.killed = true;
    DropJobs(n);
    if (n.ws) {
      boost::system::error_code ec;
      beast::get_lowest_layer(*n.ws).socket().close(ec);
    }
    return "";
  }
  if (cmd == "hang") {
    n.hung = true;
    return "";
  }
  if (cmd == "revive") {
    DropJobs(n);
    if (n.hung) {
      n.hung = false;
      if (n.ws) {
        boost::system::error_code ec;
        beast::get_lowest_layer(*n.ws).socket().close(ec);
      }
    }
    if (n.killed) {
      n.killed = false;
      n.wait_timer.cancel();
    }
    return "";
  }
  if (!n.registered || n.hung) return "node " + name + " is not registered";
  if (cmd == "xid" || cmd == "gpu") {
    int gpu = 0;
    std::string kind = "xid";
    int64_t code = 0;
    if (!(in >> gpu)) return "usage: xid NODE GPU CODE | gpu NODE GPU KIND CODE";
    if (cmd == "gpu" && !(in >> kind)) return "usage: gpu NODE GPU KIND CODE";
    if (!(in >> code)) code = 0;
    Send(n, Json{{"type", "gpu_event"}, {"gpu", gpu}, {"kind", kind}, {"code", code}}.dump());
    return "";
  }
  if (cmd == "exit") {
    int64_t job = 0;
    int rank = 0, code = 0;
    if (!(in >> job >> rank >> code)) return "usage: exit NODE JOB RANK CODE";
    auto it = n.jobs.find(job);
    if (it == n.jobs.end()) return "job " + std::to_string(job) + " does not run on " + name;
    auto& ranks = it->second.ranks;
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) {
      return "rank " + std::to_string(rank) + " of job " + std::to_string(job) +
             " does not run on " + name;
    }
    Send(n, Json{{"type", "rank_exited"},
                 {"job", job},
                 {"rank", rank},
                 {"restart_count", it->second.restart_count},
                 {"exit_code", code},
                 {"signal", 0}}
                .dump());
    ranks.erase(std::find(ranks.begin(), ranks.end(), rank));
    if (ranks.empty()) n.jobs.erase(it);
    return "";
  }
  return "unknown command \"" + cmd + "\"";
}

awaitable<void> Simulator::ControlLoop() {
  auto ex = co_await net::this_coro::executor;
  const int fd = ::dup(STDIN_FILENO);
  if (fd < 0) co_return;
  net::posix::stream_descriptor in(ex);
  boost::system::error_code ec;
  in.assign(fd, ec);
  if (ec) {
    ::close(fd);
    Log("no control channel on stdin: " + ec.message());
    co_return;
  }
  std::string buffer;
  while (!stopping_) {
    const size_t n = co_await net::async_read_until(in, net::dynamic_buffer(buffer), '\n',
                                                    net::redirect_error(use_awaitable, ec));
    if (ec) {
      // EOF (or stdin is not a pipe or terminal): run without control.
      if (ec != net::error::eof) Log("control channel on stdin: " + ec.message());
      co_return;
    }
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const int64_t received = NowMs();  // a fault's time: before it is carried out
    const std::string error = Command(line);
    if (line == "status" || line == "quit") continue;
    Json ack = {{"ev", "ack"}, {"cmd", line}, {"t_cmd", received}};
    if (!error.empty()) ack["error"] = error;
    Emit(ack);
  }
}

awaitable<void> Simulator::StatsLoop() {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer timer(ex);
  while (!stopping_) {
    timer.expires_after(std::chrono::seconds(o_.stats_every_s));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
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
