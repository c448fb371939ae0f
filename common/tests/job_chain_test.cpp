#include <doctest/doctest.h>

#include <string>

#include "topo/common/job_chain.hpp"

using namespace topo;
using common::ParseArraySpec;
using common::ParseDependencies;

TEST_CASE("dependency strings: Slurm's syntax, every condition kept, errors that show the fix") {
  auto d = ParseDependencies("afterok:12:13,afterany:14,afternotok:15");
  REQUIRE(d.ok());
  REQUIRE(d.value().size() == 4);
  CHECK(d.value()[0] == core::Dependency{core::DependencyKind::kAfterOk, 12});
  CHECK(d.value()[1] == core::Dependency{core::DependencyKind::kAfterOk, 13});
  CHECK(d.value()[2] == core::Dependency{core::DependencyKind::kAfterAny, 14});
  CHECK(d.value()[3] == core::Dependency{core::DependencyKind::kAfterNotOk, 15});
  CHECK(common::FormatDependencies(d.value()) == "afterok:12:13,afterany:14,afternotok:15");
  // Duplicates collapse.
  CHECK(ParseDependencies("afterok:7,afterok:7").value().size() == 1);

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"", "is not afterok"}, Bad{"afterok", "names no job"},
                       Bad{"afterok:", "is not a job id"}, Bad{"afterok:0", "is not a job id"},
                       Bad{"afterok:-3", "is not a job id"}, Bad{"afterok:1x", "is not a job id"},
                       Bad{"after:12", "is not afterok"}, Bad{"singleton", "is not afterok"},
                       Bad{"afterok:1?afterok:2", "not supported"},
                       Bad{"afterok:99999999999999999999", "is not a job id"}}) {
    auto r = ParseDependencies(b.text);
    CAPTURE(b.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find(b.says) != std::string::npos);
    CHECK(r.message().rfind("dependency: ", 0) == 0);
  }
  std::string many = "afterok";
  for (int i = 1; i <= 65; ++i) many += ":" + std::to_string(i);
  CHECK(ParseDependencies(many).message().find("more than 64") != std::string::npos);
  CHECK(ParseDependencies(std::string(5000, 'a')).message().find("longer than") !=
        std::string::npos);
}

TEST_CASE("array strings: ranges, lists, steps and a throttle, bounded") {
  auto a = ParseArraySpec("0-99%8");
  REQUIRE(a.ok());
  CHECK(a.value().tasks.size() == 100);
  CHECK(a.value().tasks.front() == 0);
  CHECK(a.value().tasks.back() == 99);
  CHECK(a.value().throttle == 8);
  auto b = ParseArraySpec("7,1,3,5-6");
  REQUIRE(b.ok());
  CHECK(b.value().tasks == std::vector<int>{1, 3, 5, 6, 7});
  CHECK(b.value().throttle == 0);
  CHECK(ParseArraySpec("0-30:10").value().tasks == std::vector<int>{0, 10, 20, 30});
  CHECK(ParseArraySpec("4").value().tasks == std::vector<int>{4});
  for (const char* bad : {"", "5-1", "a-b", "1-", "-1", "0-9%0", "0-9%", "0-9%x", "0-9:0",
                          "0-2000000", "1,,2", "0-1000"}) {
    CAPTURE(bad);
    auto r = ParseArraySpec(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().rfind("array: ", 0) == 0);
  }
  CHECK(ParseArraySpec("0-1000").message().find("more than 1000 tasks") != std::string::npos);
  CHECK(ParseArraySpec("0-999").value().tasks.size() == 1000);
}
