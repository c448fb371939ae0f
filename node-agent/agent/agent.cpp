// topo-agent on a real node (agent.hpp): the state directory, the TLS
// context, the GPU backend and the supervisor, wired to AgentCore and its
// connection on one event loop.

#include "agent.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before Boost 1.74's awaitable.hpp, which needs std::exchange

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "agent_core.hpp"
#include "cert_check.hpp"
#include "gpu/gpu_backend.hpp"
#include "supervisor_runner.hpp"
#include "topo/agent/account.hpp"
#include "topo/agent/supervisor.hpp"
#include "topo/agent/system_state.hpp"
#include "topo/common/version.hpp"

namespace topo::agent {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
using std::chrono::milliseconds;

class SteadyClock final : public AgentClock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class StderrLog final : public AgentLog {
 public:
  void Line(const std::string& node, LogLevel, const std::string& text) override {
    LogAgentLine(node, text);
  }
};

// The key proves the node's identity to the scheduler: a job that can read
// it can speak for the node. Refused like ssh refuses a readable key.
core::Status CheckKeyPrivate(const std::string& key_file) {
  struct stat st {};
  if (::stat(key_file.c_str(), &st) != 0) {
    return core::Status::Error("--key " + key_file + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return core::Status::Error("--key " + key_file + " is accessible to other users (mode " + mode +
                               "): chmod 600 " + key_file);
  }
  return core::Status::Ok();
}

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o), tls_(ssl::context::tls_client) {}
  int Run();

 private:
  void Log(const std::string& text) { log_.Line(o_.node, LogLevel::kInfo, text); }
  core::Status SetUpStateDir(std::string* state);
  core::Status SetUpTls();
  awaitable<void> TickLoop();
  awaitable<void> WatchFd(net::posix::stream_descriptor& fd, bool gpu);
  awaitable<void> ChildSignals();
  void Shutdown(int sig);
  void StopRanksBeforeExit();

  AgentOptions o_;
  net::io_context ioc_;
  ssl::context tls_;
  SteadyClock clock_;
  StderrLog log_;
  AgentCoreOptions core_options_;
  std::unique_ptr<gpu::GpuBackend> gpus_;
  std::unique_ptr<RankSupervisor> sup_;
  std::unique_ptr<SupervisorRunner> runner_;
  std::unique_ptr<ConnectionShared> shared_;
  std::unique_ptr<AgentConnection> connection_;
  std::unique_ptr<AgentCore> core_;
  // The event loop's own waits, cancelled by Shutdown so every coroutine
  // ends before the objects it uses are destroyed.
  net::steady_timer tick_timer_{ioc_};
  net::posix::stream_descriptor gpu_fd_{ioc_};
  net::posix::stream_descriptor runner_fd_{ioc_};
  net::signal_set child_signals_{ioc_, SIGCHLD};
  bool stopping_ = false;
};

core::Status Agent::SetUpStateDir(std::string* state) {
  std::error_code ec;
  const std::string dir = fs::absolute(o_.state_dir, ec).string();
  if (ec) return core::Status::Error("--state-dir " + o_.state_dir + ": " + ec.message());
  // Root's, traversable, not listable: ranks reach their own log and
  // checkpoint directories below it, nothing else.
  if (core::Status st = EnsureTraversableRoot(dir); !st.ok()) {
    return core::Status::Error("--state-dir: " + st.message());
  }
  if (!o_.persistent_checkpoint_dir.empty()) {
    if (core::Status st = EnsureTraversableRoot(o_.persistent_checkpoint_dir); !st.ok()) {
      return core::Status::Error("--persistent-checkpoint-dir: " + st.message());
    }
  }
  *state = dir;
  return core::Status::Ok();
}

core::Status Agent::SetUpTls() {
  boost::system::error_code ec;
  tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  tls_.load_verify_file(o_.ca_file, ec);
  if (ec) return core::Status::Error("--ca " + o_.ca_file + ": " + ec.message());
  if (core::Status st = CheckKeyPrivate(o_.key_file); !st.ok()) return st;
  tls_.use_certificate_chain_file(o_.cert_file, ec);
  if (ec) return core::Status::Error("--cert " + o_.cert_file + ": " + ec.message());
  tls_.use_private_key_file(o_.key_file, ssl::context::pem, ec);
  if (ec) return core::Status::Error("--key " + o_.key_file + ": " + ec.message());
  tls_.set_verify_mode(ssl::verify_peer);
  return core::Status::Ok();
}

int Agent::Run() {
  ConnectionSettings cs;
  core::Result<std::vector<ConnectionTarget>> targets = ParseServerList(o_.server_url);
  if (!targets.ok()) {
    Log(targets.message());
    return 2;
  }
  cs.targets = std::move(targets).value();
  cs.endpoint_file = o_.endpoint_file;
  cs.endpoint_text = o_.server_url;
  std::string state;
  if (core::Status st = SetUpStateDir(&state); !st.ok()) {
    Log(st.message());
    return 1;
  }
  if (core::Status st = SetUpTls(); !st.ok()) {
    Log(st.message());
    return 1;
  }

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
  gopt.simulated.inject_dir = state;  // STATE/inject, a root 0600 FIFO
  auto chosen = gpu::MakeGpuBackend(gopt);
  if (!chosen.ok()) {
    Log("GPU backend: " + chosen.message());
    return 1;
  }
  gpus_ = std::move(chosen.value().backend);
  Log("GPU backend: " + chosen.value().reason);
  // What the node has, one line a GPU, in CUDA_VISIBLE_DEVICES order: the
  // first thing to compare with nvidia-smi when a node's GPUs look wrong.
  for (const gpu::GpuInfo& g : gpus_->Inventory().gpus) {
    Log("GPU " + std::to_string(g.index) + ": " + g.name + ", " +
        (g.uuid.empty() ? std::string("no UUID") : g.uuid) + ", " +
        std::to_string(g.memory_total >> 20) + " MiB");
  }

  SupervisorOptions sopt;
  sopt.state_dir = state + "/supervisor";
  sopt.log_dir = state + "/logs";
  sopt.local_checkpoint_root = state + "/checkpoints";
  sopt.persistent_checkpoint_root = o_.persistent_checkpoint_dir;
  sopt.allow_root_jobs = o_.allow_root_jobs;
  sopt.min_job_uid = static_cast<uid_t>(o_.min_job_uid);
  sopt.cgroup_root = o_.cgroup_root;
  if (!ParseScratchMode(o_.job_scratch, &sopt.job_scratch)) {
    Log("--job-scratch " + o_.job_scratch + ": expected auto, on or off");
    return 2;
  }
  sopt.job_tmp_size = o_.job_tmp_size;
  sopt.job_shm_size = o_.job_shm_size;
  sopt.keep_checkpoints = o_.keep_checkpoints;
  {
    // Job cgroups named for this node and this scheduler (its CA): another
    // agent on this host, or one of another scheduler, never shares one.
    std::ifstream ca(o_.ca_file);
    std::ostringstream pem;
    pem << ca.rdbuf();
    sopt.cgroup_scope = CgroupScope(o_.node, pem.str());
  }
  sup_ = std::make_unique<RankSupervisor>(sopt);
  Log("job scratch: " + sup_->Scratch().Summary());
  Log("cgroups: " + sup_->Cgroups().summary + "; job cgroups job-ID." + sopt.cgroup_scope);
  if (o_.allow_root_jobs) Log("--allow-root-jobs: ranks may run as uid 0");
  Log("jobs run as accounts of uid " + std::to_string(o_.min_job_uid) +
      " or above (--min-job-uid)" + (o_.allow_root_jobs ? " or as root" : ""));
  SupervisorRunnerOptions ropt;
  ropt.restrict_gpu_devices = !o_.no_gpu_device_isolation;
  ropt.local_checkpoint_root = sopt.local_checkpoint_root;
  ropt.persistent_checkpoint_root = sopt.persistent_checkpoint_root;
  ropt.pids_max = o_.job_pids_max;
  runner_ = std::make_unique<SupervisorRunner>(*sup_, ropt);
  const auto adopted = sup_->List(true);
  if (!adopted.empty()) {
    Log("adopted " + std::to_string(adopted.size()) + " running rank(s) from an earlier agent");
  }

  core_options_.addr = o_.addr;
  core_options_.agent_version = std::string("topo-agent ") + kVersion;
  core_options_.job_command = o_.job_command;
  core_options_.heartbeat_ms = o_.heartbeat_ms;
  core_options_.stop_grace_ms = o_.stop_grace_ms;
  core_options_.drain_checkpoint_ms = o_.drain_checkpoint_ms;
  core_options_.stage_wait_ms = o_.stage_wait_ms;

  uint64_t seed = o_.seed;
  if (seed == 0) {
    seed = std::hash<std::string>{}(o_.node) ^ (static_cast<uint64_t>(::getpid()) << 20);
  }
  shared_ = std::make_unique<ConnectionShared>(ioc_, tls_, cs, log_, seed);
  connection_ = std::make_unique<AgentConnection>(*shared_);
  core_ = std::make_unique<AgentCore>(o_.node, core_options_, *runner_, *gpus_, *connection_,
                                      clock_, log_);

  net::signal_set stop_signals(ioc_, SIGTERM, SIGINT);
  stop_signals.async_wait([this](const boost::system::error_code& e, int sig) {
    if (!e) Shutdown(sig);
  });
  connection_->Start(*core_);
  net::co_spawn(ioc_, TickLoop(), net::detached);
  // Our own copies of the fds: their owners keep theirs.
  boost::system::error_code ec;
  if (gpus_->WaitFd() >= 0) gpu_fd_.assign(::dup(gpus_->WaitFd()), ec);
  if (gpu_fd_.is_open()) net::co_spawn(ioc_, WatchFd(gpu_fd_, true), net::detached);
  if (sup_->wake_fd() >= 0) runner_fd_.assign(::dup(sup_->wake_fd()), ec);
  if (runner_fd_.is_open()) net::co_spawn(ioc_, WatchFd(runner_fd_, false), net::detached);
  net::co_spawn(ioc_, ChildSignals(), net::detached);
  Log("node " + o_.node + ", scheduler " + o_.server_url + ", state " + state);
  ioc_.run();
  // Let every coroutine see `stopping` and end (Shutdown cancelled what
  // they wait on) before what they use is destroyed.
  ioc_.restart();
  ioc_.run_for(std::chrono::seconds(2));

  // Ranks still being started are handed to the supervisor first: they
  // are then stopped below, or adopted by the next agent.
  runner_->WaitForLaunches();
  if (o_.stop_ranks_on_exit) StopRanksBeforeExit();
  Log("exiting");
  return 0;
}

void Agent::StopRanksBeforeExit() {
  for (const RankInfo& r : sup_->List(true)) (void)sup_->Stop(r.job_id, o_.stop_grace_ms);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(o_.stop_grace_ms + 2000);
  while (!sup_->List(true).empty() && std::chrono::steady_clock::now() < deadline) {
    (void)sup_->Poll();
    std::this_thread::sleep_for(milliseconds(50));
  }
  // One more poll: it removes the job cgroups whose ranks are gone.
  (void)sup_->Poll();
  Log("stopped every rank (--stop-ranks-on-exit)");
}

void Agent::Shutdown(int sig) {
  // The machine shutting down takes the ranks with it: the scheduler is
  // then not asked to wait for a next agent (system_state.hpp).
  const bool machine_down = !o_.stop_ranks_on_exit && SystemStopping();
  Log(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": stopping" +
      (o_.stop_ranks_on_exit ? " and stopping the ranks"
       : machine_down
           ? "; the machine is shutting down (drain a node before a reboot to move its jobs "
             "first)"
           : "; ranks keep running for the next agent to adopt"));
  stopping_ = true;
  shared_->stopping = true;
  if (o_.stop_ranks_on_exit || machine_down) {
    connection_->Close();
  } else {
    // The ranks stay for the next agent: the scheduler keeps the node's
    // jobs while it restarts (agent_restart_grace_ms), instead of moving
    // them after two heartbeat intervals.
    connection_->CloseAfter(proto::WriteAgentMessage(proto::Leaving{}));
  }
  boost::system::error_code ec;
  tick_timer_.cancel();
  gpu_fd_.close(ec);
  runner_fd_.close(ec);
  child_signals_.cancel(ec);
  ioc_.stop();
}

awaitable<void> Agent::TickLoop() {
  while (!stopping_) {
    tick_timer_.expires_after(milliseconds(100));
    boost::system::error_code ec;
    co_await tick_timer_.async_wait(net::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    core_->PollGpus();
    core_->Tick();
  }
}

awaitable<void> Agent::WatchFd(net::posix::stream_descriptor& fd, bool gpu) {
  while (!stopping_) {
    boost::system::error_code ec;
    co_await fd.async_wait(net::posix::stream_descriptor::wait_read,
                           net::redirect_error(use_awaitable, ec));
    if (ec || stopping_) break;
    if (gpu) {
      core_->PollGpus();
    } else {
      core_->Tick();
    }
    // A wake-up with nothing behind it is allowed; never spin on one:
    // the owner's Poll drains the fd, so the next wait blocks.
  }
}

awaitable<void> Agent::ChildSignals() {
  while (!stopping_) {
    boost::system::error_code ec;
    co_await child_signals_.async_wait(net::redirect_error(use_awaitable, ec));
    if (ec || stopping_) break;
    core_->Tick();  // exits reported, a launch waiting for them started
  }
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  Agent agent(options);
  return agent.Run();
}

}  // namespace topo::agent
