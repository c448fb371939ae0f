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

}  // namespace topo::core
