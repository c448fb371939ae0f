// The Slurm bridge: the plugin's socket, the scontrol poller, the actions.

#include "daemon/slurm/slurm_bridge.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "topo/common/hostlist.hpp"
#include "topo/common/user_api.hpp"

extern char** environ;

namespace topo::daemon {
namespace {

using core::Status;
using Clock = std::chrono::steady_clock;

void Log(const std::string& line) {
  std::string out = "topo-scheduler: slurm: " + line + "\n";
  std::cerr << out << std::flush;
}

bool KeyLike(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == ':' || c == '/' || c == '.';
    if (!ok) return false;
  }
  return true;
}

struct Output {
  int exit_code = -1;  // -1: did not run or was killed
  std::string out;
  std::string err;
};

// Runs argv with a deadline; stdout and stderr captured; stdin /dev/null.
Output RunCommand(const std::vector<std::string>& argv, int timeout_ms) {
  Output result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.err = std::strerror(errno);
    return result;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.err = std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    result.err = "cannot run " + argv[0] + ": " + std::strerror(rc);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  bool out_open = true, err_open = true, killed = false;
  char buf[65536];
  while (out_open || err_open) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[2] = {{out_pipe[0], short(out_open ? POLLIN : 0), 0},
                     {err_pipe[0], short(err_open ? POLLIN : 0), 0}};
    if (poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        (i == 0 ? out_open : err_open) = false;
      }
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) {
    result.err = argv[0] + " ran longer than " + std::to_string(timeout_ms) + " ms; killed";
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

// ---------------------------------------------------------------- parsing

std::vector<std::pair<std::string, std::string>> ParseScontrolLine(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t end = line.find(' ', i);
    if (end == std::string::npos) end = line.size();
    std::string_view tok(line.data() + i, end - i);
    i = end + 1;
    if (tok.empty()) continue;
    const size_t eq = tok.find('=');
    if (eq != std::string_view::npos && eq > 0 && KeyLike(tok.substr(0, eq))) {
      out.emplace_back(std::string(tok.substr(0, eq)), std::string(tok.substr(eq + 1)));
    } else if (!out.empty()) {
      out.back().second += " " + std::string(tok);
    }
  }
  return out;
}

std::vector<SlurmNodeView> ParseScontrolNodes(const std::string& text) {
  std::vector<SlurmNodeView> nodes;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(i, end - i);
    i = end + 1;
    SlurmNodeView v;
    for (auto& [k, val] : ParseScontrolLine(line)) {
      if (k == "NodeName") v.name = val;
      if (k == "State") v.state = val;
      if (k == "Reason") {
        v.reason = val.substr(0, val.rfind(" ["));
        if (val.find(" [") == std::string::npos) v.reason = val;
      }
    }
    if (!v.name.empty()) nodes.push_back(std::move(v));
  }
  return nodes;
}

core::Result<std::vector<SlurmJobView>> ParseSqueueJobs(const std::string& text) {
  using nlohmann::json;
  // Only the fields used are kept: a job's full entry is some 3 KiB, and a
  // big queue's dump tens of MB.
  static const std::set<std::string, std::less<>> kKeep = {
      "job_id", "job_state", "priority", "nodes", "admin_comment", "state_reason"};
  std::string top_key;  // the top object's key being read
  const json::parser_callback_t keep = [&top_key](int depth, json::parse_event_t event,
                                                  json& parsed) {
    // depth 1: the top object's keys; 3: a job's keys (jobs[] at 2).
    if (event != json::parse_event_t::key || !parsed.is_string()) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    if (depth == 1) top_key = key;
    return depth != 3 || top_key != "jobs" || kKeep.count(key) > 0;
  };
  const json doc = json::parse(text, keep, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Error("squeue --json printed no JSON object");
  }
  if (auto e = doc.find("errors"); e != doc.end() && e->is_array() && !e->empty()) {
    return Status::Error("squeue --json reports errors: " + e->dump().substr(0, 300));
  }
  auto list = doc.find("jobs");
  if (list == doc.end() || !list->is_array()) {
    return Status::Error("squeue --json printed no \"jobs\" list");
  }
  auto str = [](const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::vector<SlurmJobView> jobs;
  for (const json& j : *list) {
    if (!j.is_object()) continue;
    auto id = j.find("job_id");
    if (id == j.end() || !id->is_number_integer()) continue;
    SlurmJobView v;
    v.id = id->get<int64_t>();
    if (auto st = j.find("job_state"); st != j.end()) {
      if (st->is_string()) {
        v.state = st->get<std::string>();
      } else if (st->is_array() && !st->empty() && (*st)[0].is_string()) {
        v.state = (*st)[0].get<std::string>();
      }
    }
    if (auto p = j.find("priority"); p != j.end()) {
      const json* n = p->is_object() && p->contains("number") ? &(*p)["number"] : &*p;
      if (n->is_number_integer()) v.priority = n->get<int64_t>();
    }
    const std::string nodes = str(j, "nodes");
    if (!nodes.empty() && nodes != "(null)") {
      core::Result<std::vector<std::string>> names = common::ExpandHostlist(nodes, 100000);
      if (names.ok()) v.nodes = std::move(names).value();
    }
    v.admin_comment = Trimmed(str(j, "admin_comment"));
    v.state_reason = str(j, "state_reason");
    v.checkpoint_signal = common::ParseSlurmCheckpointSignal(v.admin_comment);
    jobs.push_back(std::move(v));
  }
  return jobs;
}

// ---------------------------------------------------------------- bridge

class SlurmBridge::Impl {
 public:
  Impl(const DaemonConfig& config, SlurmCalls calls, StrandPost post)
      : config_(config), calls_(std::move(calls)), post_(std::move(post)) {}

  Status Start();
  void Stop();

 private:
  // On the strand: work; then wait for the answer (after the commit).
  std::optional<HttpResponse> OnStrand(std::function<HttpResponse(core::TimeMs)> work,
                                       int timeout_ms);
  std::string Scontrol() const {
    return config_.slurm_bin_dir.empty() ? "scontrol" : config_.slurm_bin_dir + "/scontrol";
  }
  std::string Squeue() const {
    return config_.slurm_bin_dir.empty() ? "squeue" : config_.slurm_bin_dir + "/squeue";
  }
  std::string Scancel() const {
    return config_.slurm_bin_dir.empty() ? "scancel" : config_.slurm_bin_dir + "/scancel";
  }
  void PollLoop();
  bool PollOnce();
  void Act(const std::vector<SlurmAction>& actions);
  // `scontrol update JobId=.. AdminComment=..` when the action carries one.
  void SetAdminComment(const SlurmAction& a);
  void ListenLoop();
  void Serve(int fd);
  bool PeerAllowed(int fd) const;

  const DaemonConfig config_;
  SlurmCalls calls_;
  StrandPost post_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread poller_, listener_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poll_requested_ = false;
  uint64_t polls_done_ = 0;  // guarded by mu_
  uid_t slurm_uid_ = static_cast<uid_t>(-1);
  // Releases sent: Slurm job -> when (re-sent if still held after 10 s).
  std::map<int64_t, Clock::time_point> released_;
  // Requeues, holds and checkpoint signals sent: Slurm job -> when (a
  // requeue or hold is re-sent if still needed 10 s later; a signal is sent
  // once per run).
  std::map<int64_t, Clock::time_point> requeued_, held_, signalled_;
  std::map<int64_t, std::string> held_why_;  // the reason of the hold in held_
};

SlurmBridge::SlurmBridge(const DaemonConfig& config, SlurmCalls calls, StrandPost post)
    : impl_(std::make_unique<Impl>(config, std::move(calls), std::move(post))) {}
SlurmBridge::~SlurmBridge() { Stop(); }
Status SlurmBridge::Start() { return impl_->Start(); }
void SlurmBridge::Stop() { impl_->Stop(); }

Status SlurmBridge::Impl::Start() {
  const std::string& path = config_.slurm_socket;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::Error("slurm_socket " + path + " is too long for a unix socket");
  }
  if (const passwd* pw = getpwnam(config_.slurm_user.c_str())) slurm_uid_ = pw->pw_uid;
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::Error(std::string("socket(): ") + std::strerror(errno));
  // A socket file left by a previous run: remove it only if nobody listens.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      close(probe);
      return Status::Error("slurm_socket " + path + ": another process listens there");
    }
    if (probe >= 0) close(probe);
    unlink(path.c_str());
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      chmod(path.c_str(), 0666) != 0 || listen(listen_fd_, 64) != 0) {
    const std::string why = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return Status::Error("cannot listen on slurm_socket " + path + ": " + why +
                         " (does its directory exist?)");
  }
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::Error(std::string("pipe(): ") + std::strerror(errno));
  }
  poller_ = std::thread([this] { PollLoop(); });
  listener_ = std::thread([this] { ListenLoop(); });
  Log("listening on " + path + ", polling Slurm every " +
      std::to_string(config_.slurm_poll_interval_ms) + " ms");
  return Status::Ok();
}

void SlurmBridge::Impl::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (wake_pipe_[1] >= 0) (void)!write(wake_pipe_[1], "x", 1);
  if (poller_.joinable()) poller_.join();
  if (listener_.joinable()) listener_.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(config_.slurm_socket.c_str());
    listen_fd_ = -1;
  }
  for (int& fd : wake_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

std::optional<HttpResponse> SlurmBridge::Impl::OnStrand(
    std::function<HttpResponse(core::TimeMs)> work, int timeout_ms) {
  auto promise = std::make_shared<std::promise<HttpResponse>>();
  std::future<HttpResponse> answer = promise->get_future();
  post_(std::move(work), [promise](HttpResponse r) { promise->set_value(std::move(r)); });
  // In slices, so Stop (the server has stopped: work will never run) is quick.
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (answer.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    std::lock_guard lock(mu_);
    if (stop_ || Clock::now() > deadline) return std::nullopt;
  }
  return answer.get();
}

// ---- poller

bool SlurmBridge::Impl::PollOnce() {
  const int t = config_.slurm_command_timeout_ms;
  Output nodes = RunCommand({Scontrol(), "show", "node", "-o"}, t);
  if (nodes.exit_code != 0) {
    Log("scontrol show node failed: " + Trimmed(nodes.err.substr(0, 300)));
    return false;
  }
  Output jobs = RunCommand({Squeue(), "--json"}, t);
  if (jobs.exit_code != 0) {
    Log("squeue --json failed (Slurm mode needs Slurm 21.08 or later, built with JSON "
        "support): " +
        Trimmed(jobs.err.substr(0, 300)));
    return false;
  }
  core::Result<std::vector<SlurmJobView>> parsed = ParseSqueueJobs(jobs.out);
  if (!parsed.ok()) {
    Log(parsed.message() + "; that poll is skipped");
    return false;
  }
  auto snapshot = std::make_shared<SlurmSnapshot>();
  snapshot->nodes = ParseScontrolNodes(nodes.out);
  snapshot->jobs = std::move(parsed).value();
  auto actions = std::make_shared<std::vector<SlurmAction>>();
  std::optional<HttpResponse> r = OnStrand(
      [this, snapshot, actions](core::TimeMs now) {
        *actions = calls_.sync(*snapshot, now);
        return HttpResponse{};
      },
      30000);
  if (!r || r->status != 200) {
    std::lock_guard lock(mu_);
    if (!stop_) Log("the sync was not committed; nothing done in Slurm");
    return false;
  }
  Act(*actions);
  return true;
}

void SlurmBridge::Impl::Act(const std::vector<SlurmAction>& actions) {
  const int t = config_.slurm_command_timeout_ms;
  for (const SlurmAction& a : actions) {
    if (a.kind == SlurmAction::Kind::kRelease) {
      auto it = released_.find(a.slurm_job);
      if (it != released_.end() && Clock::now() - it->second < std::chrono::seconds(10)) continue;
      released_[a.slurm_job] = Clock::now();
      std::string list;
      for (const std::string& n : a.nodes) list += (list.empty() ? "" : ",") + n;
      const std::string id = std::to_string(a.slurm_job);
      std::vector<std::string> update = {Scontrol(),
                                         "update",
                                         "JobId=" + id,
                                         "ReqNodeList=" + list,
                                         "NumNodes=" + std::to_string(a.nodes.size()),
                                         "AdminComment=" + a.admin_comment};
      // Slurm makes a requeued job wait out its old credential's lifetime
      // (AuthInfo cred_expire, 120 s) before it may start again; a job
      // toposched requeued starts on its new nodes 3 s later (slurmd refuses
      // a launch whose credential is not newer, in whole seconds, than the
      // requeue's revocation of the old one).
      if (requeued_.count(a.slurm_job)) update.push_back("StartTime=now+3");
      Output u = RunCommand(update, t);
      Output r = u.exit_code == 0 ? RunCommand({Scontrol(), "release", id}, t) : Output{};
      if (u.exit_code != 0 || r.exit_code != 0) {
        Log("releasing job " + id + " onto " + list +
            " failed: " + Trimmed((u.exit_code != 0 ? u.err : r.err).substr(0, 300)));
      } else {
        Log("released job " + id + " onto " + list);
      }
    } else if (a.kind == SlurmAction::Kind::kRequeue) {
      auto it = requeued_.find(a.slurm_job);
      if (it != requeued_.end() && Clock::now() - it->second < std::chrono::seconds(10)) continue;
      requeued_[a.slurm_job] = Clock::now();
      signalled_.erase(a.slurm_job);
      released_.erase(a.slurm_job);
      held_.erase(a.slurm_job);
      const std::string id = std::to_string(a.slurm_job);
      Output o = RunCommand({Scontrol(), "requeuehold", id}, t);
      Log("requeue job " + id + " (" + a.reason + ")" +
          (o.exit_code == 0 ? "" : " failed: " + Trimmed(o.err.substr(0, 300))));
      if (o.exit_code == 0) SetAdminComment(a);
    } else if (a.kind == SlurmAction::Kind::kHold) {
      // A hold for another reason (released again since) goes out at once.
      auto it = held_.find(a.slurm_job);
      if (it != held_.end() && held_why_[a.slurm_job] == a.reason &&
          Clock::now() - it->second < std::chrono::seconds(10)) {
        continue;
      }
      held_[a.slurm_job] = Clock::now();
      held_why_[a.slurm_job] = a.reason;
      const std::string id = std::to_string(a.slurm_job);
      Output o = RunCommand({Scontrol(), "hold", id}, t);
      Log("hold job " + id + " (" + a.reason + ")" +
          (o.exit_code == 0 ? "" : " failed: " + Trimmed(o.err.substr(0, 300))));
      if (o.exit_code == 0) SetAdminComment(a);
    } else if (a.kind == SlurmAction::Kind::kSignal) {
      if (signalled_.count(a.slurm_job)) continue;
      signalled_[a.slurm_job] = Clock::now();
      const std::string id = std::to_string(a.slurm_job);
      // As Slurm sends the job's --signal: to its steps, or with B: to the
      // batch shell only.
      std::vector<std::string> argv = {Scancel(), "--signal=" + std::to_string(a.signal.number)};
      if (a.signal.batch_only) argv.push_back("--batch");
      argv.push_back(id);
      Output o = RunCommand(argv, t);
      Log("checkpoint signal " + std::to_string(a.signal.number) +
          (a.signal.batch_only ? " (batch shell)" : " (steps)") + " to job " + id + " (" +
          a.reason + ")" + (o.exit_code == 0 ? "" : " failed: " + Trimmed(o.err.substr(0, 300))));
    } else {
      const std::string& node = a.nodes.at(0);
      std::vector<std::string> argv = {Scontrol(), "update", "NodeName=" + node};
      if (a.kind == SlurmAction::Kind::kDrain) {
        argv.push_back("State=DRAIN");
        argv.push_back("Reason=" + a.reason.substr(0, 200));
      } else {
        argv.push_back("State=RESUME");
      }
      Output o = RunCommand(argv, t);
      Log(std::string(a.kind == SlurmAction::Kind::kDrain ? "drain " : "resume ") + node +
          (o.exit_code == 0 ? "" : " failed: " + Trimmed(o.err.substr(0, 300))));
    }
  }
  // Forget releases, requeues, holds and signals long done.
  for (auto* sent : {&released_, &requeued_, &held_, &signalled_}) {
    for (auto it = sent->begin(); it != sent->end();) {
      it = Clock::now() - it->second > std::chrono::minutes(10) ? sent->erase(it) : std::next(it);
    }
  }
  for (auto it = held_why_.begin(); it != held_why_.end();) {
    it = held_.count(it->first) ? std::next(it) : held_why_.erase(it);
  }
}

void SlurmBridge::Impl::SetAdminComment(const SlurmAction& a) {
  if (a.admin_comment.empty()) return;
  const std::string id = std::to_string(a.slurm_job);
  Output o = RunCommand({Scontrol(), "update", "JobId=" + id, "AdminComment=" + a.admin_comment},
                        config_.slurm_command_timeout_ms);
  if (o.exit_code != 0) {
    Log("setting job " + id + "'s AdminComment failed: " + Trimmed(o.err.substr(0, 300)));
  }
}

void SlurmBridge::Impl::PollLoop() {
  for (;;) {
    const bool ok = PollOnce();
    {
      std::unique_lock lock(mu_);
      if (ok || polls_done_ == 0) ++polls_done_;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::milliseconds(config_.slurm_poll_interval_ms),
                   [this] { return stop_ || poll_requested_; });
      if (stop_) return;
      poll_requested_ = false;
    }
  }
}

// ---- listener

bool SlurmBridge::Impl::PeerAllowed(int fd) const {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == getuid() || cred.uid == slurm_uid_;
}

void SlurmBridge::Impl::ListenLoop() {
  {
    // Answer only from a synced view: wait for the first poll.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return stop_ || polls_done_ > 0; });
    if (stop_) return;
  }
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void SlurmBridge::Impl::Serve(int fd) {
  if (!PeerAllowed(fd)) {
    Log("refused a connection from a user who is not root, " + config_.slurm_user +
        " or the daemon's own");
    return;
  }
  // One line, within a second.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  std::string line;
  char buf[16384];
  while (line.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || line.size() > (1u << 20)) return;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    line.append(buf, static_cast<size_t>(n));
  }
  line.resize(line.find('\n'));
  // The plugin's line, read once by the API's reader of it (docs/slurm.md).
  std::string field;
  core::Result<api::SlurmSubmitLine> req = api::ParseSlurmSubmitLine(line, &field);
  std::string answer;
  if (!req.ok()) {
    answer = "PASS the request line does not read: " + req.message();
    for (char& c : answer) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    Log("refused a request line: " + req.message().substr(0, 300));
  } else if (req.value().op == api::SlurmOp::kRefresh) {
    // A poll that starts after this request, finished.
    std::unique_lock lock(mu_);
    const uint64_t target = polls_done_ + 2;
    poll_requested_ = true;
    cv_.notify_all();
    const bool done = cv_.wait_for(lock, std::chrono::seconds(20),
                                   [&] { return stop_ || polls_done_ >= target; });
    answer = done ? "OK synced" : "PASS no sync within 20 s";
  } else {
    std::string user;
    if (req.value().uid && *req.value().uid >= 0) {
      passwd pw{}, *found = nullptr;
      char pwbuf[4096];
      if (getpwuid_r(static_cast<uid_t>(*req.value().uid), &pw, pwbuf, sizeof(pwbuf), &found) ==
              0 &&
          found != nullptr) {
        user = found->pw_name;
      }
    }
    auto out = std::make_shared<std::string>();
    std::optional<HttpResponse> r = OnStrand(
        [this, line = req.value(), user, out](core::TimeMs now) {
          *out = calls_.request(line, user, now);
          return HttpResponse{};
        },
        2000);
    if (!r) {
      Log("a request waited more than 2 s for the scheduler; not answered");
      return;
    }
    if (r->status != 200) {
      Log("a request was not committed; not answered (the plugin fails open)");
      return;
    }
    answer = *out;
    if (req.value().op == api::SlurmOp::kSubmit) Log("plugin request -> " + answer.substr(0, 300));
    if (answer.rfind("HOLD ", 0) == 0) {
      // The next poll makes the job's hold an operator's (SlurmSync): at
      // once, so its user has no time to release it onto nodes Slurm picks.
      // That poll's squeue waits for slurmctld to finish creating the job.
      std::lock_guard lock(mu_);
      poll_requested_ = true;
      cv_.notify_all();
    }
  }
  answer += "\n";
  size_t sent = 0;
  const auto wdeadline = Clock::now() + std::chrono::seconds(1);
  while (sent < answer.size() && Clock::now() < wdeadline) {
    const ssize_t n = send(fd, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      (void)poll(&p, 1, 100);
    } else {
      break;
    }
  }
}

}  // namespace topo::daemon
