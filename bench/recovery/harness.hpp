#pragma once
// bench_recovery's processes: a real topo-scheduler in a temporary state
// directory, reached over its HTTPS API, and `topo-agent --simulate`
// processes driven through their stdin and read through their stdout events
// (node-agent/agent/simulate.hpp). Plus /proc readings for CPU and memory.
//
// Thread safety: SimProcess's event tables are guarded by its own mutex (a
// reader thread fills them); everything else belongs to the calling thread.

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace topo::bench {

using Json = nlohmann::json;

int64_t WallMs();

class Daemon {
 public:
  ~Daemon() { Stop(); }
  // Starts `binary` with a config file holding `config`; false (and the log
  // on stderr) when it does not write its endpoint in 20 s.
  bool Start(const std::string& binary, const std::string& config);
  void Stop();
  // One HTTPS request; throws std::runtime_error on a transport error or a
  // status >= 300.
  Json Call(const std::string& method, const std::string& target, const Json& body = nullptr);
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string dir_, url_, token_;
  int port_ = 0;
};

// A `topo-agent --simulate` child process.
class SimProcess {
 public:
  struct Start {
    std::string node;
    int64_t t;
    int64_t checkpoint_step;
  };
  ~SimProcess() { Stop(); }
  // Starts agent_bin --simulate with args; events are read by a thread.
  bool Launch(const std::string& agent_bin, const std::vector<std::string>& args,
              const std::string& log_path);
  void Stop();
  void Send(const std::string& line);
  pid_t pid() const { return pid_; }

  // Waits until pred (called under the lock) holds or timeout_ms passes.
  bool WaitFor(const std::function<bool()>& pred, int64_t timeout_ms);
  // The newest "status" event after sending `status` (null on timeout).
  Json Status(int64_t timeout_ms = 10000);
  // Sends `line` and returns its ack (null on timeout).
  Json Command(const std::string& line, int64_t timeout_ms = 10000);

  // Guarded by mu(): starts per (job, restart_count), checkpoint reports
  // per (job, step) -> wall time, "ready".
  std::mutex& mu() { return mu_; }
  const std::map<std::pair<int64_t, int>, std::vector<Start>>& starts() const { return starts_; }
  const std::map<std::pair<int64_t, int64_t>, int64_t>& checkpoints() const { return ckpts_; }
  bool ready() const { return ready_; }
  bool exited() const { return exited_; }

 private:
  void ReadLoop();

  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, int>, std::vector<Start>> starts_;
  std::map<std::pair<int64_t, int64_t>, int64_t> ckpts_;
  std::vector<Json> acks_;
  Json status_;
  int64_t status_count_ = 0;
  bool ready_ = false;
  bool exited_ = false;
};

// utime + stime of a process, in seconds; -1 when it cannot be read.
double CpuSeconds(pid_t pid);
// VmRSS in MiB; -1 when it cannot be read.
double RssMiB(pid_t pid);
// The soft RLIMIT_NOFILE of a process (its /proc/PID/limits); -1 unknown.
int64_t OpenFileLimit(pid_t pid);

double Percentile(std::vector<double> v, double p);

}  // namespace topo::bench
