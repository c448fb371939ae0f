// The node-name rule (node_name.hpp).

#include "topo/common/node_name.hpp"

#include <algorithm>
#include <cstdio>

namespace topo::common {

namespace {

bool AlNum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNodeNameBytes || !AlNum(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return AlNum(c) || c == '.' || c == '_' || c == '-'; });
}

std::string_view NodeNameRule() {
  return "1-64 bytes of A-Z a-z 0-9 . _ -, starting with a letter or a digit";
}

std::string ShownName(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > 80) out += "... (" + std::to_string(name.size()) + " bytes)";
  return out;
}

core::Status CheckNodeName(std::string_view name) {
  if (ValidNodeName(name)) return core::Status::Ok();
  return core::Status::Error("node \"" + ShownName(name) +
                             "\" is not a node name: " + std::string(NodeNameRule()));
}

}  // namespace topo::common
