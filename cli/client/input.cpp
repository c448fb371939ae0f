// Bounded reading of the files a command names.

#include "client/input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace topo::cli {

using core::Result;
using core::Status;

namespace {

// `exact`: `size` is the file's size; otherwise reading stopped at it.
Status TooLarge(const std::string& shown, size_t size, bool exact, const InputLimit& limit) {
  std::string m =
      shown + (exact ? " is " + FormatBytes(size) + ", more than " : " holds more than ");
  m += std::string(limit.what) + " may hold";
  if (!exact) m += " (reading stopped at " + FormatBytes(limit.max_bytes) + ")";
  const std::string exact_limit = std::to_string(limit.max_bytes) + " bytes";
  m += ": at most " + FormatBytes(limit.max_bytes);
  if (FormatBytes(limit.max_bytes) != exact_limit) m += " (" + exact_limit + ")";
  if (!limit.why.empty()) m += ", " + std::string(limit.why);
  if (!limit.fix.empty()) m += "; " + std::string(limit.fix);
  return Status::Error(m);
}

}  // namespace

std::string FormatBytes(size_t bytes) {
  constexpr size_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (bytes < 10 * kKiB) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  const size_t unit = bytes >= kGiB ? kGiB : bytes >= kMiB ? kMiB : kKiB;
  const char* name = unit == kGiB ? "GiB" : unit == kMiB ? "MiB" : "KiB";
  if (bytes % unit == 0) return std::to_string(bytes / unit) + " " + name;
  // One decimal, rounded down: a size just under a limit never reads as
  // the limit itself.
  const size_t tenths = bytes * 10 / unit;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " " + name;
}

Result<std::string> ReadInputFd(int fd, const std::string& shown, const InputLimit& limit) {
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Error(shown + ": is a directory, not a file");
    // A regular file says its size: refuse before reading any of it.
    if (S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) > limit.max_bytes) {
      return TooLarge(shown, static_cast<size_t>(st.st_size), true, limit);
    }
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    // Never ask for more than one byte past the limit.
    const size_t want = std::min(sizeof buf, limit.max_bytes + 1 - out.size());
    const ssize_t n = read(fd, buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error(shown + ": cannot read (" + std::strerror(errno) + ")");
    }
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit.max_bytes) return TooLarge(shown, out.size(), false, limit);
  }
}

Result<std::string> ReadInputFile(const std::string& path, const InputLimit& limit) {
  if (path == "-") return ReadInputFd(STDIN_FILENO, "<stdin>", limit);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open (" + std::strerror(errno) + ")");
  Result<std::string> text = ReadInputFd(fd, path, limit);
  close(fd);
  return text;
}

}  // namespace topo::cli
