#pragma once
// Reading the files a command names (`--spec FILE`, a batch script, a
// topology), never more than the command can use: reading stops one byte
// past the limit, so `--spec /dev/zero` or an endless pipe ends at once with
// an error instead of filling memory. Regular files, devices, pipes and
// standard input ("-") are all read the same way.

#include <cstddef>
#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::cli {

// The most a `--spec` file may hold: the daemon's request body limit
// (max_body_bytes, 1 MiB by default), which the spec has to fit in.
inline constexpr size_t kMaxSpecFileBytes = size_t{1} << 20;
// The most a topology file may hold: the daemon's max_topology_bytes default.
inline constexpr size_t kMaxTopologyFileBytes = size_t{64} << 20;

struct InputLimit {
  size_t max_bytes = 0;
  std::string_view what;  // "a job spec (--spec)"
  std::string_view why;   // where the limit comes from
  std::string_view fix;   // what to do instead
};

// The whole of `path` ("-": standard input) when it holds at most
// limit.max_bytes. Errors name the file, the limit and the fix:
//   "big.json: 4.8 MiB is more than a job spec (--spec) may hold: at most
//    1 MiB (1048576 bytes), the API's body limit; <fix>"
// A directory, a missing or unreadable file is an error naming the path.
core::Result<std::string> ReadInputFile(const std::string& path, const InputLimit& limit);

// The same for an open descriptor (not closed); `shown` names it in errors.
core::Result<std::string> ReadInputFd(int fd, const std::string& shown, const InputLimit& limit);

// "1 MiB", "128 KiB", "4.8 MiB", "300 bytes".
std::string FormatBytes(size_t bytes);

// A point in time for --since/--until, as Unix milliseconds: "7d", "12h",
// "30m", "2w" ago from now_ms; "2026-11-01" (local midnight),
// "2026-11-01T14:30" or "2026-11-01 14:30[:05]" (local time); "now". Errors
// name `flag`, what was given and the accepted forms.
core::Result<int64_t> ParseWhen(std::string_view text, int64_t now_ms, std::string_view flag);

// A point in time for --start/--end, as Unix milliseconds: "now",
// "now+2h" (a duration as --time takes it, submit.hpp), an ISO-8601 time
// "2026-11-01T14:30[:05]" (local time; with "Z" or "+01:00": that offset),
// "2026-11-01" (local midnight), or Unix milliseconds "1798790400000".
// Errors name `flag`, what was given and the accepted forms.
core::Result<int64_t> ParseTimePoint(std::string_view text, int64_t now_ms, std::string_view flag);

}  // namespace topo::cli
