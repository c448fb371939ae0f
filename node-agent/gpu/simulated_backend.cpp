// SimulatedBackend: N GPUs of one model; faults come from Inject* calls and
// from lines written to the FIFO DIR/inject.
//
// One descriptor serves as WaitFd(): the read end of the FIFO when there is
// an inject directory, else of an anonymous pipe. Inject* calls queue their
// events and write one wake byte (0x01) to the write end the backend keeps;
// Poll drains the descriptor, drops wake bytes, and parses the rest as
// injection lines. Keeping a write end open also means the FIFO never reads
// end-of-file when an outside writer closes it.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "gpu/gpu_backend.hpp"

namespace topo::agent::gpu {

namespace {
constexpr char kWakeByte = '\x01';

bool SetNonBlockCloexec(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return false;
  const int fdfl = fcntl(fd, F_GETFD);
  return fdfl >= 0 && fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) == 0;
}
}  // namespace

struct SimulatedBackend::Impl {
  SimulatedOptions options;
  GpuInventory inventory;
  int read_fd = -1;
  int write_fd = -1;
  std::string inject_path;

  mutable std::mutex mu;
  std::vector<HealthEvent> pending;  // guarded by mu; `at` is set by Poll
  struct GpuState {
    bool faulty = false;  // an XID, ECC error or loss since the last clear
    bool thermal = false;
    bool lost = false;
  };
  std::vector<GpuState> state;      // guarded by mu
  std::string partial_line;         // guarded by mu
  int line_no = 0;                  // guarded by mu
  std::vector<std::string> errors;  // guarded by mu

  ~Impl() {
    if (read_fd >= 0) close(read_fd);
    if (write_fd >= 0) close(write_fd);
  }

  void Push(int gpu, HealthEventKind kind, int64_t code, bool on, const char* detail) {
    HealthEvent e;
    e.gpu = gpu;
    e.kind = kind;
    e.code = code;
    e.on = on;
    e.detail = detail;
    pending.push_back(std::move(e));
  }

  // REQUIRES: mu held, c.gpu in range.
  void ApplyLocked(const InjectCommand& c, const char* detail) {
    GpuState& s = state[c.gpu];
    switch (c.kind) {
      case HealthEventKind::kXid:
        s.faulty = true;
        Push(c.gpu, c.kind, c.a, true, detail);
        break;
      case HealthEventKind::kEccSingleBit:
      case HealthEventKind::kEccDoubleBit:
        if (c.a > 0) Push(c.gpu, HealthEventKind::kEccSingleBit, c.a, true, detail);
        if (c.b > 0) Push(c.gpu, HealthEventKind::kEccDoubleBit, c.b, true, detail);
        if (c.a > 0 || c.b > 0) s.faulty = true;
        break;
      case HealthEventKind::kThermal: {
        const bool on = c.a != 0;
        if (s.thermal == on) break;
        s.thermal = on;
        Push(c.gpu, c.kind, 0, on, detail);
        if (!on && !s.faulty && !s.lost) {
          Push(c.gpu, HealthEventKind::kCleared, 0, true, "thermal throttling ended");
        }
        break;
      }
      case HealthEventKind::kOffBus:
        if (s.lost) break;
        s.lost = true;
        s.faulty = true;
        Push(c.gpu, c.kind, 0, true, detail);
        break;
      case HealthEventKind::kCleared:
        s = GpuState{};
        Push(c.gpu, c.kind, 0, true, detail);
        break;
    }
  }

  void Wake() const {
    // A full pipe is already readable; a lost wake byte loses nothing.
    const ssize_t n = write(write_fd, &kWakeByte, 1);
    (void)n;
  }

  // REQUIRES: mu held.
  void ReadInjectLinesLocked() {
    char buf[4096];
    for (;;) {
      const ssize_t n = read(read_fd, buf, sizeof buf);
      if (n <= 0) break;  // EAGAIN: drained (the kept write end means no EOF)
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] == kWakeByte) continue;
        if (buf[i] != '\n') {
          if (partial_line.size() < 4096) partial_line += buf[i];
          continue;
        }
        ++line_no;
        auto r = ParseInjectLine(partial_line, line_no, inventory.count());
        partial_line.clear();
        if (!r.ok()) {
          RecordError(r.message());
        } else if (r.value()) {
          ApplyLocked(*r.value(), "injected through the inject FIFO");
        }
      }
    }
  }

  void RecordError(const std::string& msg) {
    errors.push_back(msg);
    if (options.inject_dir.empty()) return;
    const std::string path = options.inject_dir + "/inject.errors";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const std::string line = msg + "\n";
    const ssize_t n = write(fd, line.data(), line.size());
    (void)n;
    close(fd);
  }
};

core::Result<std::unique_ptr<SimulatedBackend>> SimulatedBackend::Create(
    const SimulatedOptions& options) {
  if (options.gpus < 1 || options.gpus > 64) {
    return core::Status::Error("simulated GPUs: count " + std::to_string(options.gpus) +
                               " out of range; a node has 1 to 64 GPUs");
  }
  if (options.model.empty()) return core::Status::Error("simulated GPUs: the model is empty");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->state.resize(options.gpus);
  for (int i = 0; i < options.gpus; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = options.model;
    g.uuid = options.uuid_prefix + (options.node.empty() ? "" : "-" + options.node) + "-" +
             std::to_string(i);
    g.memory_total = options.memory_total;
    impl->inventory.gpus.push_back(std::move(g));
  }
  if (options.inject_dir.empty()) {
    int fds[2];
    if (pipe(fds) != 0) {
      return core::Status::Error(std::string("simulated GPUs: pipe: ") + std::strerror(errno));
    }
    impl->read_fd = fds[0];
    impl->write_fd = fds[1];
  } else {
    impl->inject_path = options.inject_dir + "/inject";
    const char* p = impl->inject_path.c_str();
    if (mkfifo(p, 0600) != 0 && errno != EEXIST) {
      return core::Status::Error("simulated GPUs: cannot create the inject FIFO " +
                                 impl->inject_path + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (stat(p, &st) != 0 || !S_ISFIFO(st.st_mode)) {
      return core::Status::Error(impl->inject_path +
                                 " exists and is not a FIFO; remove it so the agent can make one");
    }
    impl->read_fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (impl->read_fd >= 0) impl->write_fd = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (impl->read_fd < 0 || impl->write_fd < 0) {
      return core::Status::Error("simulated GPUs: cannot open the inject FIFO " +
                                 impl->inject_path + ": " + std::strerror(errno));
    }
  }
  if (!SetNonBlockCloexec(impl->read_fd) || !SetNonBlockCloexec(impl->write_fd)) {
    return core::Status::Error(std::string("simulated GPUs: fcntl: ") + std::strerror(errno));
  }
  return std::unique_ptr<SimulatedBackend>(new SimulatedBackend(std::move(impl)));
}

SimulatedBackend::SimulatedBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimulatedBackend::~SimulatedBackend() = default;

const GpuInventory& SimulatedBackend::Inventory() const { return impl_->inventory; }
int SimulatedBackend::WaitFd() const { return impl_->read_fd; }
std::string SimulatedBackend::InjectPath() const { return impl_->inject_path; }

std::vector<HealthEvent> SimulatedBackend::Poll(core::TimeMs now) {
  std::lock_guard lock(impl_->mu);
  impl_->ReadInjectLinesLocked();
  std::vector<HealthEvent> out;
  out.swap(impl_->pending);
  for (HealthEvent& e : out) e.at = now;
  return out;
}

std::vector<std::string> SimulatedBackend::InjectErrors() const {
  std::lock_guard lock(impl_->mu);
  return impl_->errors;
}

core::Status SimulatedBackend::Inject(const InjectCommand& c) {
  if (c.gpu < 0 || c.gpu >= impl_->inventory.count()) {
    return core::Status::Error("GPU " + std::to_string(c.gpu) +
                               " out of range (this node has GPUs 0-" +
                               std::to_string(impl_->inventory.count() - 1) + ")");
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->ApplyLocked(c, "injected");
  }
  impl_->Wake();
  return core::Status::Ok();
}

core::Status SimulatedBackend::InjectXid(int gpu, int code) {
  if (code < 1) return core::Status::Error("XID code must be positive");
  return Inject({HealthEventKind::kXid, gpu, code, 0});
}
core::Status SimulatedBackend::InjectEcc(int gpu, int64_t single_bit, int64_t double_bit) {
  if (single_bit < 0 || double_bit < 0) return core::Status::Error("ECC counts must be >= 0");
  return Inject({HealthEventKind::kEccSingleBit, gpu, single_bit, double_bit});
}
core::Status SimulatedBackend::InjectThermal(int gpu, bool on) {
  return Inject({HealthEventKind::kThermal, gpu, on ? 1 : 0, 0});
}
core::Status SimulatedBackend::InjectOffBus(int gpu) {
  return Inject({HealthEventKind::kOffBus, gpu, 0, 0});
}
core::Status SimulatedBackend::Clear(int gpu) {
  return Inject({HealthEventKind::kCleared, gpu, 0, 0});
}

}  // namespace topo::agent::gpu
