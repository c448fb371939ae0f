// "did you mean" for mistyped verbs and flags (commands/options.cpp).

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "commands/options.hpp"

namespace topo::cli {
namespace {

TEST_CASE("NearestName: typos, prefixes, and nothing when nothing is near") {
  const std::vector<std::string> verbs{"submit", "queue", "show", "cancel", "nodes", "token"};
  CHECK(NearestName("sumbit", verbs) == "submit");
  CHECK(NearestName("qeueu", verbs) == "queue");
  CHECK(NearestName("canc", verbs) == "cancel");
  CHECK(NearestName("xyzzy", verbs).empty());
  CHECK(NearestName("", verbs).empty());
  CHECK(NearestName(std::string(1000, 'a'), verbs).empty());
}

// What SuggestForUnknown says after CLI11 refused `line`.
std::string Suggest(std::vector<std::string> line) {
  CLI::App app{"t", "topo"};
  app.require_subcommand(1);
  std::string value;
  CLI::App* submit = app.add_subcommand("submit");
  submit->add_option("--time", value);
  submit->add_option("--gpus", value);
  CLI::App* token = app.add_subcommand("token");
  token->require_subcommand(1);
  token->add_subcommand("create")->add_option("--out", value);
  token->add_subcommand("revoke");
  std::vector<std::string> reversed(line.rbegin(), line.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
  }
  return SuggestForUnknown(app, line);
}

TEST_CASE("SuggestForUnknown: the verb or flag the user meant, at the level that parsed") {
  CHECK(Suggest({"sumbit"}) ==
        "'sumbit' is not a topo command; did you mean 'submit'? (topo --help)");
  CHECK(Suggest({"submit", "--tme", "1h"}) ==
        "'--tme' is not a flag of topo submit; did you mean '--time'? (topo submit --help)");
  CHECK(Suggest({"submit", "--gpus=8", "--tim=1h"}).find("did you mean '--time'") !=
        std::string::npos);
  CHECK(Suggest({"token", "craete"}).find("not a topo token command; did you mean 'create'") !=
        std::string::npos);
  CHECK(Suggest({"submit", "--wxyz"}) ==
        "'--wxyz' is not a flag of topo submit (topo submit --help)");
  // After --, nothing is a flag.
  CHECK(Suggest({"submit", "--", "--tme"}).empty());
}

// What UsageError says after CLI11 refused `line` (a bad value or a missing
// argument, no unknown name).
std::string Usage(std::vector<std::string> line) {
  CLI::App app{"t", "topo"};
  app.require_subcommand(1);
  std::string value;
  CLI::App* queue = app.add_subcommand("queue");
  queue->add_option("--state", value)->check(CLI::IsMember({"queued", "running"}));
  CLI::App* token = app.add_subcommand("token");
  token->require_subcommand(1);
  token->add_subcommand("create")->add_option("--out", value)->required();
  std::vector<std::string> reversed(line.rbegin(), line.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return UsageError(app, e.what());
  }
  return "(parsed)";
}

TEST_CASE("UsageError: CLI11's message on one line, with the help of the verb that parsed") {
  const std::string bad_state = Usage({"queue", "--state", "bogus"});
  CHECK(bad_state.rfind("--state: ", 0) == 0);
  CHECK(bad_state.find('\n') == std::string::npos);
  CHECK(bad_state.size() > std::string(" (topo queue --help)").size());
  CHECK(bad_state.substr(bad_state.size() - 20) == " (topo queue --help)");
  // A nested verb is named whole.
  const std::string missing = Usage({"token", "create"});
  CHECK(missing.find("--out") != std::string::npos);
  CHECK(missing.find("(topo token create --help)") != std::string::npos);
  CHECK(Usage({}).find("(topo --help)") != std::string::npos);
  // A mistyped flag of a nested verb names the verb whole too.
  CHECK(Suggest({"token", "create", "--otu", "x"}) ==
        "'--otu' is not a flag of topo token create; did you mean '--out'? "
        "(topo token create --help)");
}

}  // namespace
}  // namespace topo::cli
