// Prints the agent protocol's JSON Schema (common/agent_protocol.hpp):
//   ./build/common/topo-protocol-schema > schema/agent-protocol.schema.json
// A test checks the checked-in file against it.

#include <cstdio>
#include <string>

#include "topo/common/agent_protocol.hpp"

int main() {
  const std::string text = topo::proto::ProtocolSchema().dump(2) + "\n";
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() ? 0 : 1;
}
