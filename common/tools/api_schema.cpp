// Prints the user API's JSON Schema (common/user_api.hpp):
//   ./build/common/topo-api-schema > schema/api.schema.json
// A test checks the checked-in file against it.

#include <cstdio>
#include <string>

#include "topo/common/user_api.hpp"

int main() {
  const std::string text = topo::api::ApiSchema().dump(2) + "\n";
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() ? 0 : 1;
}
