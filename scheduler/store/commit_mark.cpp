// The commit mark's file (commit_mark.hpp).

#include "store/commit_mark.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>

#include "store/store.hpp"

namespace topo::store::internal {
namespace {

using core::Result;
using core::Status;

constexpr std::string_view kMagic = "toposched-commit-mark 1 ";
constexpr size_t kMaxIdBytes = 64;

std::string Errno(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

std::string Sum(std::string_view line) { return Sha256Hex(line).substr(0, 16); }

// One slot's bytes: the line, padded with '\n' to kMarkSlotBytes.
std::string EncodeSlot(const CommitMark& m) {
  std::string line = std::string(kMagic) + "store=" + m.store_id + " seq=" + std::to_string(m.seq) +
                     " job=" + std::to_string(m.max_job_id);
  line += " sum=" + Sum(line) + "\n";
  line.resize(kMarkSlotBytes, '\n');
  return line;
}

bool ParseInt(std::string_view text, int64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

// The record a slot holds, if it is a whole, valid one.
std::optional<CommitMark> DecodeSlot(std::string_view slot) {
  const size_t nl = slot.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  const std::string_view line = slot.substr(0, nl);
  const size_t sum_at = line.rfind(" sum=");
  if (!line.starts_with(kMagic) || sum_at == std::string_view::npos) return std::nullopt;
  if (line.substr(sum_at + 5) != Sum(line.substr(0, sum_at))) return std::nullopt;
  // store=ID seq=N job=N
  std::string_view rest = line.substr(kMagic.size(), sum_at - kMagic.size());
  CommitMark m;
  auto field = [&rest](std::string_view key) -> std::optional<std::string_view> {
    if (!rest.starts_with(key)) return std::nullopt;
    rest.remove_prefix(key.size());
    const size_t sp = rest.find(' ');
    std::string_view value = rest.substr(0, sp);
    rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp + 1);
    return value;
  };
  std::optional<std::string_view> id = field("store=");
  std::optional<std::string_view> seq = field("seq=");
  std::optional<std::string_view> job = field("job=");
  if (!id || !seq || !job || !rest.empty() || id->size() > kMaxIdBytes) return std::nullopt;
  if (!ParseInt(*seq, m.seq) || !ParseInt(*job, m.max_job_id)) return std::nullopt;
  m.store_id = std::string(*id);
  return m;
}

Status WriteAll(int fd, std::string_view bytes, off_t at, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(Errno("cannot write", path));
    bytes.remove_prefix(static_cast<size_t>(n));
    at += n;
  }
  return Status::Ok();
}

}  // namespace

std::string CommitMarkPath(const std::string& db_path) { return db_path + ".mark"; }

std::string NewStoreId() {
  std::random_device entropy;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int word = 0; word < 4; ++word) {
    uint32_t bits = entropy();
    for (int i = 0; i < 8; ++i, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

Result<std::optional<ReadMark>> ReadCommitMark(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<ReadMark>();
    return Status::Error(Errno("cannot open", path));
  }
  std::string bytes(2 * kMarkSlotBytes + 1, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = Status::Error(Errno("cannot read", path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  std::optional<CommitMark> slots[2];
  for (int i = 0; i < 2; ++i) {
    const size_t at = static_cast<size_t>(i) * kMarkSlotBytes;
    if (at < bytes.size()) {
      slots[i] = DecodeSlot(std::string_view(bytes).substr(at, kMarkSlotBytes));
    }
  }
  if (!slots[0] && !slots[1]) {
    return Status::Error(path + " holds no valid record (" + std::to_string(got) +
                         " bytes; each of its two slots is cut short or fails its checksum)");
  }
  if (slots[0] && slots[1] && slots[0]->store_id != slots[1]->store_id) {
    return Status::Error(path + " holds records of two different stores (" + slots[0]->store_id +
                         ", " + slots[1]->store_id + ")");
  }
  ReadMark r;
  r.both_valid = slots[0] && slots[1];
  r.newest_slot = !slots[0] || (slots[1] && slots[1]->seq > slots[0]->seq) ? 1 : 0;
  r.mark = *slots[r.newest_slot];
  return std::optional<ReadMark>(std::move(r));
}

Status ResetCommitMark(const std::string& path, const CommitMark& mark) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(Errno("cannot create", tmp));
  const std::string slot = EncodeSlot(mark);
  Status s = WriteAll(fd, slot + slot, 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::Error(Errno("cannot fsync", tmp));
  if (::close(fd) != 0 && s.ok()) s = Status::Error(Errno("cannot close", tmp));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::Error(Errno("cannot rename " + tmp + " to", path));
  }
  if (!s.ok()) {
    std::filesystem::remove(tmp, ec);
    return s;
  }
  // The rename is durable only once the directory is.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::Error(Errno("cannot open the directory", dir));
  const bool synced = ::fsync(dfd) == 0;
  ::close(dfd);
  if (!synced) return Status::Error(Errno("cannot fsync the directory", dir));
  return Status::Ok();
}

Result<CommitMarkWriter> CommitMarkWriter::Open(const std::string& path, int newest_slot) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::Error(Errno("cannot open", path));
  return CommitMarkWriter(path, fd, newest_slot == 0 ? 1 : 0);
}

CommitMarkWriter::CommitMarkWriter(CommitMarkWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      next_slot_(other.next_slot_) {}

CommitMarkWriter& CommitMarkWriter::operator=(CommitMarkWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    next_slot_ = other.next_slot_;
  }
  return *this;
}

CommitMarkWriter::~CommitMarkWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status CommitMarkWriter::Write(const CommitMark& mark) {
  if (fd_ < 0) return Status::Error(path_ + ": the commit mark is not open");
  Status s =
      WriteAll(fd_, EncodeSlot(mark), static_cast<off_t>(next_slot_) * kMarkSlotBytes, path_);
  if (s.ok() && ::fdatasync(fd_) != 0) s = Status::Error(Errno("cannot fdatasync", path_));
  if (!s.ok()) return s;
  next_slot_ = 1 - next_slot_;
  return Status::Ok();
}

}  // namespace topo::store::internal
