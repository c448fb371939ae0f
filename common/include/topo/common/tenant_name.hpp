#pragma once
// The one rule for tenant names: what the API takes as a tenant (a job's,
// a quota's, a user's), what a partition or reservation may list, and what
// the log's reader holds them to.
//
//   segments of [a-z0-9][a-z0-9_.-]* joined by '/', at most 8 deep and
//   kMaxTenantBytes in all ("org/team/user").
//
// Thread safety: pure functions.

#include <cstddef>
#include <string_view>

namespace topo::common {

inline constexpr size_t kMaxTenantBytes = 128;

bool ValidTenantName(std::string_view name);

}  // namespace topo::common
