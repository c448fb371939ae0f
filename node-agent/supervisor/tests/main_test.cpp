// The supervisor tests start real processes as real Unix accounts in real
// cgroups: they need root. Without it the whole binary is skipped (77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "test_util.hpp"

int main(int argc, char** argv) {
  using namespace topo::agent::testing;
  bool listing = false;  // test discovery at build time runs no test
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0) {
      listing = true;
    }
  }
  if (!listing) {
    if (!IsRoot()) {
      std::puts("SKIP: the supervisor tests create Unix accounts and cgroups: run them as root");
      return 77;
    }
    CleanStaleTestArtifacts();
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
