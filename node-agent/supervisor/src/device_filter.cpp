// GPU device isolation on cgroup v2 (cgroup.hpp): a BPF program of type
// BPF_PROG_TYPE_CGROUP_DEVICE attached to the job's cgroup. The kernel runs
// it on every open (and mknod) of a device node by a process in the cgroup
// with struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor;},
// access_type = (access << 16) | type; a return of 0 refuses with EPERM.
//
// The program, written out here (no compiler, no libbpf): for a character
// device (type BPF_DEVCG_DEV_CHAR) whose major:minor is in the deny list,
// return 0; for anything else, 1. Three instructions per denied device,
// nine around them (seven for an empty list, which has no "deny"):
//
//   r2 = *(u32 *)(r1 + 0)        access_type
//   r2 &= 0xffff                 its device type
//   if r2 != CHAR goto allow
//   r3 = *(u32 *)(r1 + 4)        major
//   r4 = *(u32 *)(r1 + 8)        minor
//   for each denied MAJ:MIN:
//     if r3 != MAJ goto +2
//     if r4 != MIN goto +1
//     goto deny
//   allow: r0 = 1; exit
//   deny:  r0 = 0; exit
//
// The program is attached without BPF_F_ALLOW_MULTI: attaching to a cgroup
// reused from an earlier run of the job replaces that run's program, and
// programs of the enclosing cgroups (systemd's) still apply.

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "device_filter.hpp"

namespace topo::agent {

namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

long Bpf(int cmd, bpf_attr* attr) { return ::syscall(SYS_bpf, cmd, attr, sizeof(*attr)); }

// Loads the program; its fd, or -errno. `log` gets the verifier's words.
int Load(const std::vector<bpf_insn>& prog, std::string* log) {
  static const char kLicense[] = "GPL";
  std::string buf(4096, '\0');
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(prog.data());
  attr.insn_cnt = static_cast<uint32_t>(prog.size());
  attr.license = reinterpret_cast<uint64_t>(kLicense);
  attr.log_buf = reinterpret_cast<uint64_t>(buf.data());
  attr.log_size = static_cast<uint32_t>(buf.size());
  attr.log_level = log ? 1 : 0;
  if (!log) {
    attr.log_buf = 0;
    attr.log_size = 0;
  }
  const long fd = Bpf(BPF_PROG_LOAD, &attr);
  if (fd < 0) {
    const int err = errno;
    if (log) *log = buf.c_str();
    return -err;
  }
  return static_cast<int>(fd);
}

}  // namespace

std::vector<bpf_insn> DeviceDenyProgram(const std::vector<DeviceNumber>& denied) {
  constexpr uint8_t kR0 = BPF_REG_0, kR1 = BPF_REG_1, kR2 = BPF_REG_2, kR3 = BPF_REG_3,
                    kR4 = BPF_REG_4;
  std::vector<bpf_insn> p;
  p.reserve(9 + 3 * denied.size());
  p.push_back(
      Insn(BPF_LDX | BPF_MEM | BPF_W, kR2, kR1, offsetof(bpf_cgroup_dev_ctx, access_type), 0));
  p.push_back(Insn(BPF_ALU64 | BPF_AND | BPF_K, kR2, 0, 0, 0xffff));
  // To "allow": past the loads and the list.
  p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, kR2, 0, static_cast<int16_t>(2 + 3 * denied.size()),
                   BPF_DEVCG_DEV_CHAR));
  p.push_back(Insn(BPF_LDX | BPF_MEM | BPF_W, kR3, kR1, offsetof(bpf_cgroup_dev_ctx, major), 0));
  p.push_back(Insn(BPF_LDX | BPF_MEM | BPF_W, kR4, kR1, offsetof(bpf_cgroup_dev_ctx, minor), 0));
  for (size_t i = 0; i < denied.size(); ++i) {
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, kR3, 0, 2, static_cast<int32_t>(denied[i].major)));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, kR4, 0, 1, static_cast<int32_t>(denied[i].minor)));
    // To "deny": past the rest of the list and "allow".
    const size_t after = denied.size() - i - 1;
    p.push_back(Insn(BPF_JMP | BPF_JA, 0, 0, static_cast<int16_t>(3 * after + 2), 0));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, kR0, 0, 0, 1));  // allow
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  // The verifier refuses code nothing jumps to: no "deny" without a list.
  if (!denied.empty()) {
    p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, kR0, 0, 0, 0));  // deny
    p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  return p;
}

core::Status DeviceFilterAvailable() {
  const int fd = Load(DeviceDenyProgram({}), nullptr);
  if (fd < 0) {
    return core::Status::Error(std::string("the kernel refuses a BPF device program: ") +
                               std::strerror(-fd));
  }
  ::close(fd);
  return core::Status::Ok();
}

core::Status AttachDeviceDenyList(const std::string& cgroup_dir,
                                  const std::vector<DeviceNumber>& denied) {
  if (denied.size() > kMaxDeniedDevices) {
    return core::Status::Error("too many device nodes to deny (" + std::to_string(denied.size()) +
                               ", at most " + std::to_string(kMaxDeniedDevices) + ")");
  }
  std::string log;
  const int prog = Load(DeviceDenyProgram(denied), &log);
  if (prog < 0) {
    return core::Status::Error(std::string("loading the BPF device program: ") +
                               std::strerror(-prog) + (log.empty() ? "" : " (" + log + ")"));
  }
  const int cg = ::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) {
    const int err = errno;
    ::close(prog);
    return core::Status::Error("opening " + cgroup_dir + ": " + std::strerror(err));
  }
  bpf_attr attr{};
  attr.target_fd = static_cast<uint32_t>(cg);
  attr.attach_bpf_fd = static_cast<uint32_t>(prog);
  attr.attach_type = BPF_CGROUP_DEVICE;
  attr.attach_flags = 0;
  const long rc = Bpf(BPF_PROG_ATTACH, &attr);
  const int err = errno;
  // The attachment holds the program: neither fd is needed any more.
  ::close(cg);
  ::close(prog);
  if (rc != 0) {
    return core::Status::Error("attaching the BPF device program to " + cgroup_dir + ": " +
                               std::strerror(err));
  }
  return core::Status::Ok();
}

}  // namespace topo::agent
