// The tenant-name rule (tenant_name.hpp).

#include "topo/common/tenant_name.hpp"

namespace topo::common {

bool ValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTenantBytes) return false;
  int depth = 0;
  size_t i = 0;
  while (i <= name.size()) {
    size_t end = name.find('/', i);
    if (end == std::string_view::npos) end = name.size();
    std::string_view seg = name.substr(i, end - i);
    if (seg.empty() || ++depth > 8) return false;
    if (!((seg[0] >= 'a' && seg[0] <= 'z') || (seg[0] >= '0' && seg[0] <= '9'))) return false;
    for (char c : seg) {
      const bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
      if (!ok) return false;
    }
    i = end + 1;
  }
  return true;
}

}  // namespace topo::common
