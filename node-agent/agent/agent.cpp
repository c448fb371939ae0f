// topo-agent's event loop (agent.hpp): the protocol client of
// docs/agent-protocol.md over RankSupervisor and a GpuBackend.

#include "agent.hpp"

#include <sys/stat.h>
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
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gpu/gpu_backend.hpp"
#include "topo/agent/supervisor.hpp"
#include "topo/common/job_io.hpp"

namespace topo::agent {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
namespace fs = std::filesystem;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Json = nlohmann::json;
using Ws = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;
using std::chrono::milliseconds;

constexpr const char* kAgentVersion = "topo-agent 0.1.0";

core::TimeMs NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<int64_t> JobNumber(const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view ProtocolKind(gpu::HealthEventKind k) {
  switch (k) {
    case gpu::HealthEventKind::kXid:
      return "xid";
    case gpu::HealthEventKind::kEccSingleBit:
      return "ecc_single_bit";
    case gpu::HealthEventKind::kEccDoubleBit:
      return "ecc_double_bit";
    case gpu::HealthEventKind::kThermal:
      return "thermal";
    case gpu::HealthEventKind::kOffBus:
      return "off_bus";
    case gpu::HealthEventKind::kCleared:
      return "cleared";
  }
  return "cleared";
}

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o), tls_(ssl::context::tls_client) {
    uint64_t seed = o.seed;
    if (seed == 0)
      seed = std::hash<std::string>{}(o.node) ^ (static_cast<uint64_t>(::getpid()) << 20);
    rng_.seed(seed);
  }

  int Run();

 private:
  void Log(const std::string& msg) const {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm t{};
    gmtime_r(&ts.tv_sec, &t);
    char when[32];
    std::strftime(when, sizeof when, "%H:%M:%S", &t);
    std::fprintf(stderr, "%s.%03ld topo-agent %s: %s\n", when, ts.tv_nsec / 1000000,
                 o_.node.c_str(), msg.c_str());
    std::fflush(stderr);
  }

  // ---- connection
  awaitable<void> ConnectLoop();
  awaitable<void> Session();
  void Disconnected();
  void Send(const Json& m);
  void WriteNext();
  // Reports survive a disconnection: queued until the next `registered`.
  void Report(Json m);
  void SendRegister();
  void HandleMessage(const std::string& text);

  // ---- work
  awaitable<void> HeartbeatLoop();
  awaitable<void> TickLoop();
  awaitable<void> WatchFd(int fd, bool gpu);
  awaitable<void> ChildSignals();
  void PollSupervisor();
  void PollGpu();
  std::set<std::string> RunningJobs() const;
  bool HasRunning(const std::string& job) const;
  void HandleStart(const Json& j);
  void HandleStop(const std::string& job, const std::string& reason);
  void HandleDrain(const Json& j);
  void HandleLogs(const Json& j);
  void Reconcile(const Json& keep);
  void TryPendingLaunches();
  void FailLaunch(const JobLaunch& l, const std::string& why);
  void DrainProgress();
  int64_t DrainStep(const std::string& job) const;
  int RestartCountOf(const std::string& job);
  void Shutdown(int sig);

  AgentOptions o_;
  ServerUrl url_;
  net::io_context ioc_;
  ssl::context tls_;
  std::mt19937_64 rng_;
  std::unique_ptr<gpu::GpuBackend> gpu_;
  std::unique_ptr<RankSupervisor> sup_;

  std::shared_ptr<Ws> ws_;
  uint64_t gen_ = 0;  // connection generation: callbacks of an old one do nothing
  std::deque<std::shared_ptr<std::string>> outbox_;
  bool writing_ = false;
  bool registered_ = false;
  bool session_registered_ = false;
  std::string last_refusal_;
  std::deque<Json> pending_reports_;
  int heartbeat_ms_ = 1000;
  int64_t seq_ = 0;
  bool stopping_ = false;
  std::unique_ptr<net::steady_timer> hb_timer_;

  struct PendingLaunch {
    JobLaunch launch;
    int attempts = 0;
    std::string last_error;
  };
  std::map<std::string, PendingLaunch> pending_launch_;
  std::map<std::string, int> restart_counts_;

  enum class DrainPhase { kNone, kCheckpoint, kStopping };
  DrainPhase drain_ = DrainPhase::kNone;
  core::TimeMs drain_deadline_ = 0;
  std::map<std::string, int64_t> drain_baseline_;
};

// ------------------------------------------------------------------ setup

int Agent::Run() {
  if (!ParseServerUrl(o_.server_url, &url_)) {
    Log("--server " + o_.server_url + ": expected wss://HOST:PORT/PATH");
    return 2;
  }
  std::error_code fec;
  fs::create_directories(o_.state_dir, fec);
  if (fec || ::chmod(o_.state_dir.c_str(), 0700) != 0) {
    Log("cannot create the state directory " + o_.state_dir + ": " +
        (fec ? fec.message() : std::string(std::strerror(errno))));
    return 1;
  }
  const std::string state = fs::absolute(o_.state_dir).string();

  boost::system::error_code ec;
  tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  tls_.load_verify_file(o_.ca_file, ec);
  if (ec) {
    Log("--ca " + o_.ca_file + ": " + ec.message());
    return 1;
  }
  tls_.use_certificate_chain_file(o_.cert_file, ec);
  if (ec) {
    Log("--cert " + o_.cert_file + ": " + ec.message());
    return 1;
  }
  tls_.use_private_key_file(o_.key_file, ssl::context::pem, ec);
  if (ec) {
    Log("--key " + o_.key_file + ": " + ec.message());
    return 1;
  }
  tls_.set_verify_mode(ssl::verify_peer);

  gpu::GpuBackendOptions gopt;
  auto choice = gpu::ParseBackendChoice(o_.gpu_backend);
  if (!choice) {
    Log("--gpu-backend " + o_.gpu_backend + ": expected auto, nvml or simulated");
    return 2;
  }
  gopt.choice = *choice;
  gopt.nvml.library = o_.nvml_library;
  gopt.simulated.gpus = o_.gpus;
  gopt.simulated.model = o_.gpu_model;
  gopt.simulated.node = o_.node;
  gopt.simulated.inject_dir = state;
  auto chosen = gpu::MakeGpuBackend(gopt);
  if (!chosen.ok()) {
    Log("GPU backend: " + chosen.message());
    return 1;
  }
  gpu_ = std::move(chosen.value().backend);
  Log("GPU backend: " + chosen.value().reason);

  SupervisorOptions sopt;
  sopt.state_dir = state + "/supervisor";
  sopt.log_dir = state + "/logs";
  sopt.local_checkpoint_root = state + "/checkpoints";
  sopt.persistent_checkpoint_root = o_.persistent_checkpoint_dir;
  sup_ = std::make_unique<RankSupervisor>(sopt);
  for (const RankInfo& r : sup_->List(false)) RestartCountOf(r.job_id);
  const auto adopted = sup_->List(true);
  if (!adopted.empty()) {
    Log("adopted " + std::to_string(adopted.size()) + " running rank(s) from an earlier agent");
  }

  hb_timer_ = std::make_unique<net::steady_timer>(ioc_);
  net::signal_set stop_signals(ioc_, SIGTERM, SIGINT);
  stop_signals.async_wait([this](const boost::system::error_code& e, int sig) {
    if (!e) Shutdown(sig);
  });
  net::co_spawn(ioc_, ConnectLoop(), net::detached);
  net::co_spawn(ioc_, HeartbeatLoop(), net::detached);
  net::co_spawn(ioc_, TickLoop(), net::detached);
  net::co_spawn(ioc_, WatchFd(gpu_->WaitFd(), true), net::detached);
  net::co_spawn(ioc_, WatchFd(sup_->wake_fd(), false), net::detached);
  net::co_spawn(ioc_, ChildSignals(), net::detached);
  Log("node " + o_.node + ", scheduler " + o_.server_url + ", state " + state);
  ioc_.run();

  if (o_.stop_ranks_on_exit) {
    for (const std::string& job : RunningJobs()) (void)sup_->Stop(job, o_.stop_grace_ms);
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(o_.stop_grace_ms + 2000);
    while (!sup_->List(true).empty() && std::chrono::steady_clock::now() < deadline) {
      (void)sup_->Poll();
      std::this_thread::sleep_for(milliseconds(50));
    }
    Log("stopped every rank (--stop-ranks-on-exit)");
  }
  Log("exiting");
  return 0;
}

void Agent::Shutdown(int sig) {
  Log(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": stopping" +
      (o_.stop_ranks_on_exit ? " and stopping the ranks"
                             : "; ranks keep running for the next agent to adopt"));
  stopping_ = true;
  if (ws_) {
    boost::system::error_code ec;
    beast::get_lowest_layer(*ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
  }
  ioc_.stop();
}

// ------------------------------------------------------------------ connection

awaitable<void> Agent::ConnectLoop() {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer timer(ex);
  int delay_ms = 100;
  for (int attempt = 1; !stopping_; ++attempt) {
    std::string why;
    try {
      co_await Session();
      why = "the connection closed";
    } catch (const boost::system::system_error& e) {
      why = e.code().message();
      if (e.code() == websocket::error::closed) why = "the scheduler closed the connection";
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!last_refusal_.empty()) why += " (refused: " + last_refusal_ + ")";
    const bool was_registered = session_registered_;
    Disconnected();
    if (stopping_) break;
    if (was_registered) delay_ms = 100;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const int wait_ms = static_cast<int>(delay_ms * jitter(rng_));
    Log(std::string(was_registered ? "connection lost" : "connection attempt") + " " +
        std::to_string(attempt) + " to " + o_.server_url + ": " + why + "; retrying in " +
        std::to_string(wait_ms) + " ms");
    delay_ms = std::min(delay_ms * 2, 5000);
    timer.expires_after(milliseconds(wait_ms));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Agent::Session() {
  auto ex = co_await net::this_coro::executor;
  last_refusal_.clear();
  session_registered_ = false;
  tcp::resolver resolver(ex);
  auto endpoints = co_await resolver.async_resolve(url_.host, url_.port, use_awaitable);
  auto ws = std::make_shared<Ws>(ex, tls_);
  beast::get_lowest_layer(*ws).expires_after(std::chrono::seconds(5));
  co_await beast::get_lowest_layer(*ws).async_connect(endpoints, use_awaitable);
  if (!IsIpAddress(url_.host)) {
    SSL_set_tlsext_host_name(ws->next_layer().native_handle(), url_.host.c_str());
  }
  ws->next_layer().set_verify_callback(ssl::host_name_verification(url_.host));
  co_await ws->next_layer().async_handshake(ssl::stream_base::client, use_awaitable);
  beast::get_lowest_layer(*ws).expires_never();
  auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::client);
  timeouts.handshake_timeout = std::chrono::seconds(5);
  timeouts.idle_timeout = std::chrono::seconds(10);
  timeouts.keep_alive_pings = true;
  ws->set_option(timeouts);
  ws->read_message_max(1u << 20);
  co_await ws->async_handshake(url_.host + ":" + url_.port, url_.path, use_awaitable);
  ws_ = ws;
  ++gen_;
  Log("connected to " + o_.server_url + "; registering");
  SendRegister();
  beast::flat_buffer buffer;
  while (!stopping_) {
    co_await ws->async_read(buffer, use_awaitable);
    std::string text = beast::buffers_to_string(buffer.data());
    buffer.consume(buffer.size());
    HandleMessage(text);
  }
}

void Agent::Disconnected() {
  if (ws_) {
    boost::system::error_code ec;
    beast::get_lowest_layer(*ws_).socket().close(ec);
  }
  ws_.reset();
  ++gen_;
  outbox_.clear();
  writing_ = false;
  registered_ = false;
}

void Agent::Send(const Json& m) {
  if (!ws_) return;
  // Rank logs are bytes, not always UTF-8: invalid sequences become U+FFFD.
  outbox_.push_back(
      std::make_shared<std::string>(m.dump(-1, ' ', false, Json::error_handler_t::replace)));
  if (!writing_) WriteNext();
}

void Agent::WriteNext() {
  if (outbox_.empty() || !ws_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  auto ws = ws_;
  auto text = outbox_.front();
  outbox_.pop_front();
  const uint64_t gen = gen_;
  ws->text(true);
  ws->async_write(net::buffer(*text), [this, ws, text, gen](beast::error_code ec, size_t) {
    if (gen != gen_) return;
    if (ec) {
      writing_ = false;
      Log("write failed: " + ec.message());
      boost::system::error_code ignored;
      beast::get_lowest_layer(*ws).socket().close(ignored);  // the read loop ends
      return;
    }
    WriteNext();
  });
}

void Agent::Report(Json m) {
  if (registered_) {
    Send(m);
    return;
  }
  if (pending_reports_.size() >= 10000) pending_reports_.pop_front();
  pending_reports_.push_back(std::move(m));
}

void Agent::SendRegister() {
  Json gpus = Json::array();
  for (const gpu::GpuInfo& g : gpu_->Inventory().gpus) {
    gpus.push_back({{"index", g.index},
                    {"model", g.name},
                    {"uuid", g.uuid},
                    {"memory_mb", g.memory_total >> 20}});
  }
  Json ranks = Json::array();
  for (const RankInfo& r : sup_->List(true)) {
    auto id = JobNumber(r.job_id);
    if (!id) continue;
    ranks.push_back({{"job", *id}, {"rank", r.rank}, {"pid", r.pid}});
  }
  Send({{"type", "register"},
        {"node", o_.node},
        {"addr", o_.addr},
        {"gpus", gpus},
        {"ranks", ranks},
        {"agent", kAgentVersion}});
}

void Agent::HandleMessage(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    Log("ignoring a message that is not a JSON object with a type: " + text.substr(0, 200));
    return;
  }
  const std::string type = j["type"];
  try {
    if (type == "registered") {
      registered_ = true;
      session_registered_ = true;
      heartbeat_ms_ = o_.heartbeat_ms > 0 ? o_.heartbeat_ms
                                          : std::max(10, j.value("heartbeat_interval_ms", 1000));
      const Json keep = j.value("keep", Json::array());
      Log("registered; heartbeat every " + std::to_string(heartbeat_ms_) + " ms; keep " +
          keep.dump());
      Reconcile(keep);
      while (!pending_reports_.empty()) {
        Send(pending_reports_.front());
        pending_reports_.pop_front();
      }
      hb_timer_->cancel();  // beat now, then at the new interval
    } else if (type == "start") {
      HandleStart(j);
    } else if (type == "stop") {
      HandleStop(std::to_string(j.at("job").get<int64_t>()), j.value("reason", ""));
    } else if (type == "checkpoint") {
      const std::string job = std::to_string(j.at("job").get<int64_t>());
      core::Status st = sup_->RequestCheckpoint(job);
      Log("checkpoint of job " + job + " requested (" + j.value("reason", "") + ")" +
          (st.ok() ? "" : ": " + st.message()));
    } else if (type == "drain") {
      HandleDrain(j);
    } else if (type == "logs") {
      HandleLogs(j);
    } else if (type == "error") {
      last_refusal_ = j.value("message", "");
      Log("the scheduler refused: " + last_refusal_);
      // The scheduler closes the connection; the read loop ends and we reconnect.
    } else {
      Log("ignoring an unknown message type \"" + type.substr(0, 40) + "\"");
    }
  } catch (const std::exception& e) {
    Log("bad " + type + " message (" + e.what() + "): " + text.substr(0, 200));
  }
}

// ------------------------------------------------------------------ loops

awaitable<void> Agent::HeartbeatLoop() {
  while (!stopping_) {
    hb_timer_->expires_after(milliseconds(heartbeat_ms_));
    boost::system::error_code ec;
    co_await hb_timer_->async_wait(net::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    if (registered_) Send({{"type", "heartbeat"}, {"seq", ++seq_}});
    PollGpu();
  }
}

awaitable<void> Agent::TickLoop() {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer timer(ex);
  while (!stopping_) {
    timer.expires_after(milliseconds(100));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    PollSupervisor();
    PollGpu();
    TryPendingLaunches();
    DrainProgress();
  }
}

awaitable<void> Agent::WatchFd(int fd, bool gpu) {
  auto ex = co_await net::this_coro::executor;
  const int mine = fd >= 0 ? ::dup(fd) : -1;  // the backend keeps its own
  if (mine < 0) co_return;
  net::posix::stream_descriptor sd(ex, mine);
  net::steady_timer pause(ex);
  while (!stopping_) {
    boost::system::error_code ec;
    co_await sd.async_wait(net::posix::stream_descriptor::wait_read,
                           net::redirect_error(use_awaitable, ec));
    if (ec || stopping_) break;
    if (gpu) {
      PollGpu();
    } else {
      PollSupervisor();
    }
    // A wake-up with nothing behind it is allowed; never spin on one.
    pause.expires_after(milliseconds(5));
    co_await pause.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Agent::ChildSignals() {
  auto ex = co_await net::this_coro::executor;
  net::signal_set sigchld(ex, SIGCHLD);
  while (!stopping_) {
    boost::system::error_code ec;
    co_await sigchld.async_wait(net::redirect_error(use_awaitable, ec));
    if (ec || stopping_) break;
    PollSupervisor();
  }
}

// ------------------------------------------------------------------ events

int Agent::RestartCountOf(const std::string& job) {
  auto it = restart_counts_.find(job);
  if (it != restart_counts_.end()) return it->second;
  // An adopted job: the supervisor's state file has it.
  int rc = 0;
  if (FILE* f = std::fopen(sup_->StatePath(job).c_str(), "r")) {
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
    Json doc = Json::parse(text, nullptr, false);
    if (doc.is_object()) rc = doc.value("restart_count", 0);
  }
  restart_counts_[job] = rc;
  return rc;
}

void Agent::PollSupervisor() {
  for (const SupervisorEvent& e : sup_->Poll()) {
    const auto id = JobNumber(e.job_id);
    switch (e.kind) {
      case EventKind::kRankExited: {
        const RankExit& x = e.exit;
        Json m = {{"type", "rank_exited"},
                  {"job", id.value_or(0)},
                  {"rank", x.rank},
                  {"restart_count", RestartCountOf(e.job_id)},
                  {"exit_code", x.signaled ? 128 + x.signal : x.exit_code},
                  {"signal", x.signaled ? x.signal : 0}};
        std::string how = x.signaled ? "signal " + std::to_string(x.signal)
                                     : "exit code " + std::to_string(x.exit_code);
        if (!x.exit_status_known) {
          // Adopted, not our child: how it ended is unknown; report a failure.
          m["exit_code"] = -1;
          m["signal"] = 0;
          m["status_known"] = false;
          how = "status unknown (adopted)";
        }
        Log("job " + e.job_id + " rank " + std::to_string(x.rank) + " (pid " +
            std::to_string(x.pid) + ") ended: " + how + (x.stopped ? ", after a stop" : ""));
        // Ranks we stopped (on the scheduler's stop, a restart, a drain or a
        // registration's keep list) are not news to the scheduler; reporting
        // them could also name a job it has already forgotten.
        if (id && !x.stopped) Report(std::move(m));
        break;
      }
      case EventKind::kCheckpointComplete:
        Log("job " + e.job_id + ": checkpoint step " + std::to_string(e.step) +
            " complete (local)");
        if (id) Report({{"type", "checkpoint"}, {"job", *id}, {"step", e.step}, {"tier", "local"}});
        break;
      case EventKind::kCheckpointPersisted:
        Log("job " + e.job_id + ": checkpoint step " + std::to_string(e.step) + " persisted");
        if (id) {
          Report({{"type", "checkpoint"}, {"job", *id}, {"step", e.step}, {"tier", "persistent"}});
        }
        break;
      case EventKind::kPersistFailed:
        Log("job " + e.job_id + ": copying checkpoint step " + std::to_string(e.step) +
            " to the persistent tier failed: " + e.message);
        break;
      case EventKind::kJobFinished:
        Log("job " + e.job_id + ": every local rank has exited");
        break;
    }
  }
}

void Agent::PollGpu() {
  for (const gpu::HealthEvent& e : gpu_->Poll(NowMs())) {
    Log("GPU event: " + gpu::DescribeEvent(e));
    if (e.kind == gpu::HealthEventKind::kThermal && !e.on) continue;  // kCleared follows
    const int64_t code = std::min<int64_t>(e.code, INT32_MAX);
    Report({{"type", "gpu_event"}, {"gpu", e.gpu}, {"kind", ProtocolKind(e.kind)}, {"code", code}});
  }
}

std::set<std::string> Agent::RunningJobs() const {
  std::set<std::string> jobs;
  for (const RankInfo& r : sup_->List(true)) jobs.insert(r.job_id);
  return jobs;
}

bool Agent::HasRunning(const std::string& job) const {
  for (const RankInfo& r : sup_->List(true)) {
    if (r.job_id == job) return true;
  }
  return false;
}

// ------------------------------------------------------------------ commands

void Agent::HandleStart(const Json& j) {
  const int64_t id = j.at("job").get<int64_t>();
  const int restart = j.value("restart_count", 0);
  const int64_t step = j.value("checkpoint_step", int64_t{-1});
  JobLaunch l;
  l.job_id = std::to_string(id);
  l.restart_count = restart;
  if (j.contains("command") && j["command"].is_array() && !j["command"].empty()) {
    for (const Json& a : j["command"]) l.argv.push_back(a.get<std::string>());
  } else if (!o_.job_command.empty()) {
    l.argv = {"/bin/sh", "-c", o_.job_command};
  }
  std::vector<std::pair<int, int>> ranks;  // (global rank, gpu)
  for (const Json& r : j.at("ranks"))
    ranks.emplace_back(r.at("rank").get<int>(), r.at("gpu").get<int>());
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    l.ranks.push_back(LocalRankSpec{ranks[i].first, static_cast<int>(i), {ranks[i].second}});
  }
  const int world = j.value("world_size", static_cast<int>(ranks.size()));
  const int local = std::max<int>(1, static_cast<int>(ranks.size()));
  Json spec = {{"name", "job-" + l.job_id}, {"gpus", world}};
  if (j.contains("layout") && j["layout"].is_object()) spec["parallelism"] = j["layout"];
  auto parsed = common::JobSpecFromJson(spec);
  if (parsed.ok()) {
    l.parallelism = parsed.value().parallelism;
  } else {
    Log("job " + l.job_id + ": layout " + j.value("layout", Json()).dump() + " not understood (" +
        parsed.message() + "); using dp = " + std::to_string(world));
    l.parallelism = core::Parallelism{};
    l.parallelism.dp = world;
  }
  l.master_addr = j.value("master_addr", std::string("127.0.0.1"));
  l.master_port = j.value("master_port", 29500);
  // The protocol does not say which node index this is: derive it from the
  // ranks (whole blocks of ranks per node, as the scheduler places them).
  l.group_rank = ranks.empty() ? 0 : ranks.front().first / local;
  l.group_world_size = (world + local - 1) / local;
  if (step >= 0) {
    const std::string local_dir = fs::absolute(o_.state_dir).string() + "/checkpoints/" + l.job_id;
    const std::string persistent_dir =
        o_.persistent_checkpoint_dir.empty() ? "" : o_.persistent_checkpoint_dir + "/" + l.job_id;
    auto has = [&](const std::string& dir) {
      if (dir.empty()) return false;
      const auto steps = CompleteSteps(dir);
      return std::find(steps.begin(), steps.end(), step) != steps.end();
    };
    if (has(local_dir)) {
      l.restart_step = step;
    } else if (has(persistent_dir)) {
      std::error_code ec;
      fs::create_directories(local_dir, ec);
      core::Status st = CopyCompleteStep(persistent_dir, local_dir, step);
      if (st.ok()) {
        l.restart_step = step;
        Log("job " + l.job_id + ": staged checkpoint step " + std::to_string(step) +
            " from the persistent tier");
      } else {
        Log("job " + l.job_id + ": staging checkpoint step " + std::to_string(step) +
            " failed: " + st.message());
      }
    } else {
      Log("job " + l.job_id + ": checkpoint step " + std::to_string(step) +
          " is on neither tier here; starting without TOPO_RESTART_STEP");
    }
  }
  if (l.argv.empty()) {
    FailLaunch(l, "no command: the start message has none and --job-command is not set");
    return;
  }
  if (drain_ != DrainPhase::kNone) Log("job " + l.job_id + ": start received while draining");
  if (HasRunning(l.job_id)) {
    Log("job " + l.job_id + " restart " + std::to_string(restart) +
        ": stopping the earlier run's ranks first");
    (void)sup_->Stop(l.job_id, o_.stop_grace_ms);
  }
  const std::string key = l.job_id;  // the right side is evaluated first
  pending_launch_[key] = PendingLaunch{std::move(l), 0, {}};
  TryPendingLaunches();
}

void Agent::FailLaunch(const JobLaunch& l, const std::string& why) {
  Log("job " + l.job_id + ": cannot start: " + why);
  const auto id = JobNumber(l.job_id);
  if (!id) return;
  for (const LocalRankSpec& r : l.ranks) {
    Report({{"type", "rank_exited"},
            {"job", *id},
            {"rank", r.rank},
            {"restart_count", l.restart_count},
            {"exit_code", 127},
            {"signal", 0}});
  }
}

void Agent::TryPendingLaunches() {
  for (auto it = pending_launch_.begin(); it != pending_launch_.end();) {
    PendingLaunch& p = it->second;
    if (HasRunning(it->first)) {
      ++it;
      continue;
    }
    core::Status st = sup_->Launch(p.launch);
    if (st.ok()) {
      // Exits are reported with the restart_count of the run they belong to:
      // set only now, after the earlier run's ranks have all been reported.
      restart_counts_[it->first] = p.launch.restart_count;
      std::string ranks;
      for (const LocalRankSpec& r : p.launch.ranks) {
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r.rank);
      }
      Log("job " + it->first + " restart " + std::to_string(p.launch.restart_count) +
          ": started ranks " + ranks + " (master " + p.launch.master_addr + ":" +
          std::to_string(p.launch.master_port) + ")");
      it = pending_launch_.erase(it);
      continue;
    }
    if (++p.attempts >= 100) {  // about 10 s of ticks
      FailLaunch(p.launch, st.message());
      it = pending_launch_.erase(it);
      continue;
    }
    if (p.last_error != st.message()) {
      p.last_error = st.message();
      Log("job " + it->first + ": launch deferred: " + st.message());
    }
    ++it;
  }
}

void Agent::HandleStop(const std::string& job, const std::string& reason) {
  pending_launch_.erase(job);
  if (!HasRunning(job)) {
    Log("stop of job " + job + " (" + reason + "): nothing runs here");
    return;
  }
  core::Status st = sup_->Stop(job, o_.stop_grace_ms);
  Log("stopping job " + job + " (" + reason + ")" + (st.ok() ? "" : ": " + st.message()));
}

void Agent::Reconcile(const Json& keep) {
  std::set<std::string> wanted;
  if (keep.is_array()) {
    for (const Json& k : keep) {
      if (k.is_number_integer()) wanted.insert(std::to_string(k.get<int64_t>()));
    }
  }
  std::set<std::string> mine = RunningJobs();
  for (const auto& [job, p] : pending_launch_) mine.insert(job);
  for (const std::string& job : mine) {
    if (wanted.count(job)) continue;
    Log("job " + job + " is not in the scheduler's keep list");
    HandleStop(job, "not kept after registration");
  }
}

// A piece of one rank's log for `topo logs` (through the scheduler): bytes
// [offset, offset + max) of LOG_DIR/JOB/rank-N.log; a negative offset counts
// from the end. Answered at once: a read of at most 256 KiB.
void Agent::HandleLogs(const Json& j) {
  const int64_t req = j.at("req").get<int64_t>();
  const std::string job = std::to_string(j.at("job").get<int64_t>());
  const int rank = j.at("rank").get<int>();
  const int64_t max = std::clamp<int64_t>(j.value("max", int64_t{65536}), 1, 256 << 10);
  int64_t offset = j.value("offset", int64_t{0});
  Json reply = {{"type", "logs"}, {"req", req}};
  const std::string path = sup_->LogPath(job, rank);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    reply["error"] = "no log file on this node (" + path + ")";
    Send(reply);
    return;
  }
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (offset < 0) offset = std::max<int64_t>(0, size + offset);
  offset = std::min(offset, size);
  std::string data(static_cast<size_t>(std::min(max, size - offset)), '\0');
  in.seekg(offset);
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  reply["offset"] = offset;
  reply["next_offset"] = offset + static_cast<int64_t>(data.size());
  reply["size"] = size;
  reply["data"] = std::move(data);
  Send(reply);
}

void Agent::HandleDrain(const Json& j) {
  const std::string mode = j.value("mode", "graceful");
  Log("drain (" + mode + "): " + j.value("reason", ""));
  pending_launch_.clear();
  drain_baseline_.clear();
  if (mode == "immediate") {
    for (const std::string& job : RunningJobs()) (void)sup_->Stop(job, 0);
    drain_ = DrainPhase::kStopping;
  } else {
    for (const std::string& job : RunningJobs()) {
      drain_baseline_[job] = DrainStep(job);
      (void)sup_->RequestCheckpoint(job);
    }
    drain_deadline_ = NowMs() + o_.drain_checkpoint_ms;
    drain_ = DrainPhase::kCheckpoint;
  }
  DrainProgress();
}

// The step a graceful drain waits for: persisted when there is a persistent
// tier (the job restarts on other nodes, which read that tier), else local.
int64_t Agent::DrainStep(const std::string& job) const {
  return (o_.persistent_checkpoint_dir.empty() ? sup_->NewestCompleteStep(job)
                                               : sup_->NewestPersistedStep(job))
      .value_or(-1);
}

void Agent::DrainProgress() {
  if (drain_ == DrainPhase::kCheckpoint) {
    bool all = true;
    for (const auto& [job, before] : drain_baseline_) {
      if (HasRunning(job) && DrainStep(job) <= before) all = false;
    }
    if (!all && NowMs() < drain_deadline_) return;
    if (!all) Log("drain: not every job checkpointed in time; stopping anyway");
    for (const std::string& job : RunningJobs()) (void)sup_->Stop(job, o_.stop_grace_ms);
    drain_ = DrainPhase::kStopping;
  }
  if (drain_ == DrainPhase::kStopping && sup_->List(true).empty() && pending_launch_.empty()) {
    drain_ = DrainPhase::kNone;
    Log("drained: no rank runs here");
    Report({{"type", "drained"}});
  }
}

}  // namespace

bool ParseServerUrl(const std::string& url, ServerUrl* out) {
  const std::string scheme = "wss://";
  if (url.rfind(scheme, 0) != 0) return false;
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  out->path = slash == std::string::npos ? "/v1/agent" : rest.substr(slash);
  size_t colon;
  if (!hostport.empty() && hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return false;
    out->host = hostport.substr(1, close - 1);
    if (close + 1 >= hostport.size() || hostport[close + 1] != ':') return false;
    colon = close + 1;
  } else {
    colon = hostport.rfind(':');
    if (colon == std::string::npos) return false;
    out->host = hostport.substr(0, colon);
  }
  out->port = hostport.substr(colon + 1);
  if (out->host.empty() || out->port.empty()) return false;
  return std::all_of(out->port.begin(), out->port.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

int RunAgent(const AgentOptions& options) {
  Agent agent(options);
  return agent.Run();
}

}  // namespace topo::agent
