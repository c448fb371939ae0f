// agent_core_tests: AgentCore, its runners and the node checks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
