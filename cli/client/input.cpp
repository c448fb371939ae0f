// Bounded reading of the files a command names.

#include "client/input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>

#include "client/submit.hpp"

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

namespace topo::cli {

core::Result<int64_t> ParseWhen(std::string_view text, int64_t now_ms, std::string_view flag) {
  auto bad = [&] {
    return core::Status::Error(std::string(flag) + ": \"" + std::string(text.substr(0, 40)) +
                               "\" is not a time; use a relative one (7d, 12h, 30m, 2w ago) or "
                               "a date (2026-11-01, 2026-11-01T14:30, local time)");
  };
  if (text == "now") return now_ms;
  if (text.size() >= 2 && text.size() <= 8 &&
      text.find_first_not_of("0123456789") == text.size() - 1) {
    int64_t n = 0;
    for (char c : text.substr(0, text.size() - 1)) n = n * 10 + (c - '0');
    int64_t unit = 0;
    switch (text.back()) {
      case 'm':
        unit = 60 * 1000;
        break;
      case 'h':
        unit = 3600 * 1000;
        break;
      case 'd':
        unit = 86400 * 1000;
        break;
      case 'w':
        unit = 7 * 86400 * 1000;
        break;
      default:
        return bad();
    }
    if (n > 100000 * 86400000LL / unit) return bad();  // beyond ~270 years
    return std::max<int64_t>(0, now_ms - n * unit);
  }
  // YYYY-MM-DD, then optionally [T ]HH:MM[:SS].
  auto digits = [&](size_t at, size_t n, int& out) {
    if (at + n > text.size()) return false;
    out = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digits(0, 4, year) || text.size() < 10 || text[4] != '-' || !digits(5, 2, month) ||
      text[7] != '-' || !digits(8, 2, day)) {
    return bad();
  }
  if (text.size() > 10) {
    if ((text[10] != 'T' && text[10] != ' ') || !digits(11, 2, hour) || text.size() < 16 ||
        text[13] != ':' || !digits(14, 2, minute)) {
      return bad();
    }
    if (text.size() > 16 && (text.size() != 19 || text[16] != ':' || !digits(17, 2, second))) {
      return bad();
    }
  }
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
      second > 59) {
    return bad();
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1) || tm.tm_mday != day) return bad();  // 2026-02-30
  return static_cast<int64_t>(t) * 1000;
}

core::Result<int64_t> ParseTimePoint(std::string_view text, int64_t now_ms, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return core::Status::Error(std::string(flag) + ": \"" + std::string(text.substr(0, 40)) +
                               "\" " + std::string(why) +
                               "; use now, now+2h, an ISO-8601 time (2026-11-01T14:30, local; "
                               "2026-11-01T14:30Z, UTC) or Unix milliseconds");
  };
  if (text == "now") return now_ms;
  if (text.rfind("now+", 0) == 0) {
    core::Result<int64_t> d = ParseDuration(text.substr(4));
    if (!d.ok()) return bad("is not now+DURATION (" + d.message() + ")");
    return now_ms + d.value() * 1000;
  }
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
    if (text.size() > 15) return bad("is past the year 9999 as Unix milliseconds");
    const int64_t ms = std::stoll(std::string(text));
    if (ms < 100000000000) {
      return bad("reads as seconds, not milliseconds (Unix milliseconds have 12 or more digits: " +
                 std::string(text) + "000)");
    }
    return ms;
  }
  // ISO-8601: the date and time ParseWhen reads, then an optional zone.
  std::string_view local = text;
  std::optional<int64_t> offset_s;
  if (text.size() > 10 && text.back() == 'Z') {
    local = text.substr(0, text.size() - 1);
    offset_s = 0;
  } else if (text.size() > 16 && (text[text.size() - 6] == '+' || text[text.size() - 6] == '-') &&
             text[text.size() - 3] == ':') {
    const std::string_view zone = text.substr(text.size() - 6);
    if (zone.find_first_not_of("0123456789", 1) != 3) return bad("has a bad UTC offset");
    const int hours = (zone[1] - '0') * 10 + (zone[2] - '0');
    const int minutes = (zone[4] - '0') * 10 + (zone[5] - '0');
    if (hours > 14 || minutes > 59) return bad("has a bad UTC offset");
    offset_s = (zone[0] == '-' ? -1 : 1) * (hours * 3600 + minutes * 60);
    local = text.substr(0, text.size() - 6);
  }
  if (local.size() < 10 || local[4] != '-') return bad("is not a time");
  core::Result<int64_t> at = ParseWhen(local, now_ms, flag);
  if (!at.ok()) return bad("is not a time");
  if (!offset_s) return at.value();
  // ParseWhen read the fields as local time; read them again as UTC.
  const std::time_t t = static_cast<std::time_t>(at.value() / 1000);
  std::tm fields{};
  localtime_r(&t, &fields);
  return (static_cast<int64_t>(timegm(&fields)) - *offset_s) * 1000;
}

}  // namespace topo::cli
