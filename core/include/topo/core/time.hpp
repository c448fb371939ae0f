#pragma once
// Virtual time and job ids, shared by the brain's parts. Time is never read
// from a clock in the core: it comes in as an argument, in milliseconds.

#include <cstdint>

namespace topo::core {

using JobId = int64_t;
using TimeMs = int64_t;
inline constexpr TimeMs kSecond = 1000;
inline constexpr TimeMs kMinute = 60 * kSecond;
inline constexpr TimeMs kHour = 60 * kMinute;
inline constexpr TimeMs kNever = INT64_MAX;
// Unix milliseconds at the end of the year 9999: the latest time any reader
// of the wire or the log takes, so no sum of two times overflows.
inline constexpr TimeMs kMaxTimeMs = 253402300799999;

}  // namespace topo::core
