#include "topo/common/hostlist.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

namespace topo::common {
namespace {

using Names = std::vector<std::string>;

Names Expand(std::string_view expr) {
  auto r = ExpandHostlist(expr);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return r.value();
}

TEST_CASE("ExpandHostlist: plain names and simple ranges") {
  CHECK(Expand("") == Names{});
  CHECK(Expand("n1") == Names{"n1"});
  CHECK(Expand("n1,n2,x") == Names{"n1", "n2", "x"});
  CHECK(Expand("n[1-3]") == Names{"n1", "n2", "n3"});
  CHECK(Expand("n[3]") == Names{"n3"});
  CHECK(Expand("n[1-3,7,9-10]") == Names{"n1", "n2", "n3", "n7", "n9", "n10"});
  CHECK(Expand("[1-2]") == Names{"1", "2"});
  CHECK(Expand("rack-a[1-2].ib") == Names{"rack-a1.ib", "rack-a2.ib"});
}

TEST_CASE("ExpandHostlist: zero padding follows the range start") {
  CHECK(Expand("gpu[0001-0003,0020]") == Names{"gpu0001", "gpu0002", "gpu0003", "gpu0020"});
  CHECK(Expand("n[08-11]") == Names{"n08", "n09", "n10", "n11"});
  CHECK(Expand("n[8-11]") == Names{"n8", "n9", "n10", "n11"});
  // Width comes from each range's own start.
  CHECK(Expand("n[1-2,003]") == Names{"n1", "n2", "n003"});
  // A start shorter than the end pads nothing past the start's width.
  CHECK(Expand("n[098-101]") == Names{"n098", "n099", "n100", "n101"});
  CHECK(Expand("n[0-1]") == Names{"n0", "n1"});
}

TEST_CASE("ExpandHostlist: bracket groups form a product, first group slowest") {
  CHECK(Expand("a[1-2]b[3-4]") == Names{"a1b3", "a1b4", "a2b3", "a2b4"});
  CHECK(Expand("r[1-2]n[1-2],x,r9n[5]") == Names{"r1n1", "r1n2", "r2n1", "r2n2", "x", "r9n5"});
  CHECK(Expand("[1-2][1-3]").size() == 6);
}

TEST_CASE("ExpandHostlist: commas inside brackets do not split items") {
  CHECK(Expand("a[1,3],b[2,4]") == Names{"a1", "a3", "b2", "b4"});
}

TEST_CASE("ExpandHostlist: limit") {
  CHECK(ExpandHostlist("n[1-10]", 10).ok());
  auto r = ExpandHostlist("n[1-11]", 10);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("limit of 10") != std::string::npos);
  CHECK(r.message().find("\"n[1-11]\"") != std::string::npos);
  // Across items, too.
  auto r2 = ExpandHostlist("a[1-6],b[1-6]", 10);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.message().find("\"b[1-6]\"") != std::string::npos);
  // Huge products are refused before anything is generated.
  auto r3 = ExpandHostlist("n[0-999999999999999999][0-999999999999999999]");
  REQUIRE_FALSE(r3.ok());
  CHECK(r3.message().find("limit") != std::string::npos);
}

struct BadCase {
  const char* expr;
  const char* must_mention;  // the offending part, named in the message
};

TEST_CASE("ExpandHostlist: malformed expressions name the offending part") {
  const BadCase cases[] = {
      {"n[1-3", "unbalanced '['"},
      {"n[1-3],m[2", "'[' at position 8 is never closed"},
      {"n1-3]", "unbalanced ']'"},
      {"n[1[2]]", "nested '['"},
      {"a,,b", "empty item"},
      {",a", "empty item"},
      {"a,", "empty item"},
      {"n[]", "empty range"},
      {"n[1,]", "empty range"},
      {"n[,1]", "empty range"},
      {"n[5-3]", "\"5-3\" runs backwards"},
      {"n[1-3,10-9]", "\"10-9\" runs backwards"},
      {"n[a-3]", "non-digit 'a'"},
      {"n[1-x]", "non-digit 'x'"},
      {"n[1-]", "\"1-\" has an empty bound"},
      {"n[-3]", "\"-3\" has an empty bound"},
      {"n[1-2-3]", "\"1-2-3\" has more than one '-'"},
      {"n[ 1]", "whitespace"},
      {"a b", "whitespace"},
      {"n[1234567890123456789]", "too long"},
  };
  for (const BadCase& c : cases) {
    CAPTURE(c.expr);
    auto r = ExpandHostlist(c.expr);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(c.must_mention) != std::string::npos);
  }
}

TEST_CASE("CompressHostlist: groups by prefix and width, keeping order") {
  CHECK(CompressHostlist({}) == "");
  CHECK(CompressHostlist({"x"}) == "x");
  CHECK(CompressHostlist({"n1"}) == "n1");
  CHECK(CompressHostlist({"gpu01", "gpu02", "gpu03", "x"}) == "gpu[01-03],x");
  CHECK(CompressHostlist({"gpu0001", "gpu0002", "gpu0020"}) == "gpu[0001-0002,0020]");
  // Different widths are different groups: n9 and n10 stay apart.
  CHECK(CompressHostlist({"n8", "n9", "n10", "n11"}) == "n[8-9],n[10-11]");
  // Order is kept, even when not ascending.
  CHECK(CompressHostlist({"n3", "n1", "n2"}) == "n[3,1-2]");
  CHECK(CompressHostlist({"a1", "b1", "a2"}) == "a1,b1,a2");
  // Names with a suffix after the digits are not grouped.
  CHECK(CompressHostlist({"r1n1", "r1n2"}) == "r1n[1-2]");
  CHECK(CompressHostlist({"a1b", "a2b"}) == "a1b,a2b");
  // Duplicates survive.
  CHECK(CompressHostlist({"n1", "n1"}) == "n[1,1]");
  // Digit runs too long to be numbers are left alone.
  CHECK(CompressHostlist({"h1234567890123456789", "h1234567890123456790"}) ==
        "h1234567890123456789,h1234567890123456790");
}

TEST_CASE("CompressHostlist then ExpandHostlist gives the names back (seeded random lists)") {
  std::mt19937 rng(20240611);
  const std::vector<std::string> prefixes = {"n", "gpu", "rack-a", "x.y", "", "h0-", "P10/S"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> names;
    int groups = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int g = 0; g < groups; ++g) {
      const std::string& prefix = prefixes[rng() % prefixes.size()];
      int width = std::uniform_int_distribution<int>(0, 5)(rng);
      int count = std::uniform_int_distribution<int>(1, 12)(rng);
      int value = std::uniform_int_distribution<int>(0, 120)(rng);
      bool ascending = rng() % 2 == 0;
      for (int i = 0; i < count; ++i) {
        if (width == 0) {
          // No digits: a plain name (or a suffixed one).
          names.push_back(prefix.empty() ? "solo" : prefix + (rng() % 2 ? "" : "z"));
          continue;
        }
        value = ascending ? value + 1 + static_cast<int>(rng() % 2) * static_cast<int>(rng() % 3)
                          : static_cast<int>(rng() % 200);
        std::string digits = std::to_string(value);
        if (static_cast<int>(digits.size()) < width) digits.insert(0, width - digits.size(), '0');
        names.push_back(prefix + digits);
      }
    }
    std::string compressed = CompressHostlist(names);
    CAPTURE(compressed);
    auto expanded = ExpandHostlist(compressed);
    REQUIRE_MESSAGE(expanded.ok(), expanded.message());
    CHECK(expanded.value() == names);
    // Compressing is idempotent on its own output.
    CHECK(CompressHostlist(expanded.value()) == compressed);
  }
}

TEST_CASE("ExpandHostlist then CompressHostlist is canonical for sorted ranges") {
  CHECK(CompressHostlist(Expand("gpu[0001-0016,0020]")) == "gpu[0001-0016,0020]");
  CHECK(CompressHostlist(Expand("n[1-4],m[7-9],z")) == "n[1-4],m[7-9],z");
  CHECK(CompressHostlist(Expand("a[1-2]b[3-4]")) == "a1b[3-4],a2b[3-4]");
}

TEST_CASE("FormatIndexRuns: consecutive values as runs, in the given order") {
  CHECK(FormatIndexRuns({}).empty());
  CHECK(FormatIndexRuns({4}) == "4");
  CHECK(FormatIndexRuns({0, 1, 2, 3, 5}) == "0-3,5");
  CHECK(FormatIndexRuns({7, 8, 1, 2}) == "7-8,1-2");
  CHECK(FormatIndexRuns({3, 3}) == "3,3");
}

}  // namespace
}  // namespace topo::common
