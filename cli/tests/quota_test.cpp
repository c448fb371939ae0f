// `topo quota set --partition-limit` and a tenant's per-partition limits in
// `topo tenants` and `topo quota show`, without a daemon: the request body
// built from the flags (errors naming the flag) and the views' text.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "client/format.hpp"
#include "client/requests.hpp"

namespace topo::cli {
namespace {

using nlohmann::json;

QuotaFlags Limits(std::vector<std::string> flags) {
  QuotaFlags q;
  q.partition_limits = std::move(flags);
  return q;
}

TEST_CASE("quota set --partition-limit: one object per partition, only the fields given") {
  core::Result<json> body = QuotaSetBody(
      Limits({"gb200:max_gpus=64,max_running_jobs=none", "debug:max_job_gpus=8", "old:none"}));
  REQUIRE_MESSAGE(body.ok(), body.message());
  CHECK(body.value() ==
        json::parse(R"({"partitions": {"gb200": {"max_gpus": 64, "max_running_jobs": 0},
                                       "debug": {"max_job_gpus": 8}, "old": null}})"));
  // Without the flag the body has no "partitions": nothing there changes.
  CHECK_FALSE(QuotaSetBody(QuotaFlags{}).value().contains("partitions"));
  struct Row {
    std::string flag, words;
  };
  const Row rows[] = {
      {"gb200", "give PART:max_gpus=N[,max_job_gpus=N][,max_running_jobs=N] (N or none)"},
      {"gb200:", "give PART:max_gpus=N"},
      {":max_gpus=8", "--partition-limit: a name is 1 to 64"},
      {"gb200:max_gpus", "give PART:max_gpus=N"},
      {"gb200:max_nodes=8", "give PART:max_gpus=N"},
      {"gb200:max_gpus=8,", "give PART:max_gpus=N"},
      {"gb200:max_gpus=-1", "--partition-limit gb200:max_gpus: '-1' is not a whole number >= 0"},
      {"gb200:max_gpus=8,max_gpus=9", "max_gpus is given twice"},
      {"a/b:max_gpus=8", "--partition-limit: 'a/b' has a character outside"},
      {"-x:max_gpus=8", "may not start with '-' or '.'"},
  };
  for (const Row& r : rows) {
    CAPTURE(r.flag);
    core::Result<json> bad = QuotaSetBody(Limits({r.flag}));
    REQUIRE_FALSE(bad.ok());
    CHECK_MESSAGE(bad.message().find(r.words) != std::string::npos, bad.message());
  }
  CHECK(QuotaSetBody(Limits({"gb:max_gpus=1", "gb:max_job_gpus=2"})).message() ==
        "--partition-limit: partition gb is given twice; give all its limits in one flag "
        "(gb:max_gpus=N,max_running_jobs=N)");
}

TEST_CASE("tenants and quota show: each partition's limits against what the tenant uses there") {
  const json tenant = json::parse(R"({"name": "org/a", "guaranteed_gpus": 0,
    "borrow_limit_gpus": -1, "max_job_gpus": 0, "max_running_jobs": 0, "shares": 1,
    "usage_gpus": 72, "running_jobs": 4, "queued_jobs": 1,
    "partitions": {"gb200": {"max_gpus": 64, "max_job_gpus": 32, "max_running_jobs": 4},
                   "debug": {"max_gpus": 0, "max_job_gpus": 0, "max_running_jobs": 1}},
    "partition_usage": {"gb200": {"usage_gpus": 56, "running_jobs": 3},
                        "h100": {"usage_gpus": 16, "running_jobs": 1}}})");
  const std::string table = FormatTenantTable(json::array({tenant}));
  CHECK_MESSAGE(table.find("  debug: 0/1 jobs; gb200: 56/64 GPUs 3/4 jobs <=32 per job\n") !=
                    std::string::npos,
                table);
  const std::string q = FormatQuota(tenant);
  CHECK_MESSAGE(q.find("  Partition debug:   0 GPUs, 0 of max 1 running\n") != std::string::npos,
                q);
  CHECK(q.find("  Partition gb200:   56 of max 64 GPUs, 3 of max 4 running, max 32 GPUs per "
               "job\n") != std::string::npos);
  // Used where it has no limits: shown, and said so.
  CHECK(q.find("  Partition h100:    16 GPUs, 1 running (no limits)\n") != std::string::npos);
  // More than three partitions with limits: the rest counted.
  json many = tenant;
  for (const char* p : {"p1", "p2", "p3"}) {
    many["partitions"][p] = {{"max_gpus", 8}, {"max_job_gpus", 0}, {"max_running_jobs", 0}};
  }
  CHECK(FormatTenantTable(json::array({many})).find("; +2 more\n") != std::string::npos);
  // None: a dash; a view without the keys (an older daemon) reads the same.
  json plain = tenant;
  plain.erase("partitions");
  plain.erase("partition_usage");
  CHECK(FormatTenantTable(json::array({plain})).find("       1  -\n") != std::string::npos);
  CHECK(FormatQuota(plain).find("Partition") == std::string::npos);
}

}  // namespace
}  // namespace topo::cli
