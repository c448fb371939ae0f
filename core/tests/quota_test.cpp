// QuotaLedger against hand-computed quotas and fairshare figures.

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "topo/core/quota.hpp"

using namespace topo::core;

namespace {

TenantConfig Tenant(std::string name, int guaranteed, int borrow = -1, int max_job = 0,
                    int max_running = 0, double shares = 1.0) {
  TenantConfig t;
  t.name = std::move(name);
  t.guaranteed_gpus = guaranteed;
  t.borrow_limit_gpus = borrow;
  t.max_job_gpus = max_job;
  t.max_running_jobs = max_running;
  t.shares = shares;
  return t;
}

}  // namespace

TEST_CASE("quota: limits are checked in order and name the limit") {
  QuotaLedger q(kHour);
  CHECK(q.tenant("default") != nullptr);
  CHECK(q.tenant("nobody") == nullptr);
  CHECK(q.Block("nobody", 1'000'000, 1'000'000).empty());  // unconfigured: no limits

  q.Configure(Tenant("a", 32, 16, 64, 2));
  CHECK(q.Block("a", 32, 32).empty());
  CHECK(q.Block("a", 65, 65) == "quota: the job asks for 65 GPUs, over tenant 'a' max_job_gpus 64");
  // 32 + 16 = 48 GPUs at most.
  CHECK(q.Block("a", 48, 48).empty());
  CHECK(q.Block("a", 48, 49) ==
        "quota: tenant 'a' would hold 49 GPUs, over its limit of 48 (guaranteed 32 + "
        "borrow_limit 16)");
  q.AddJob("a", 40);
  CHECK(q.gpus("a") == 40);
  CHECK(q.running("a") == 1);
  CHECK(q.Block("a", 8, 8).empty());
  CHECK(q.Block("a", 8, 16).find("would hold 56 GPUs") != std::string::npos);
  q.AddJob("a", 8);
  CHECK(q.Block("a", 1, 1) == "quota: tenant 'a' already runs 2 jobs, its max_running_jobs");
  q.RemoveJob("a", 40);
  CHECK(q.gpus("a") == 8);
  CHECK(q.running("a") == 1);
  CHECK(q.guaranteed("a") == 32);
  CHECK(q.guaranteed("nobody") == 0);
}

TEST_CASE("quota: usage decays with the half-life and composes over steps") {
  const TimeMs h = kHour;
  QuotaLedger one(h), two(h);
  one.AddJob("a", 10);
  two.AddJob("a", 10);
  one.Advance(2 * h);
  two.Advance(h);
  two.Advance(2 * h);
  // 10 GPUs for two half-lives: 10 x (1 - 1/4) x H / ln 2 GPU-ms.
  const double expect = 10 * 0.75 * static_cast<double>(h) / std::log(2.0);
  CHECK(one.usage("a") == doctest::Approx(expect).epsilon(1e-12));
  CHECK(two.usage("a") == doctest::Approx(expect).epsilon(1e-12));
  // Nothing held: the usage halves every half-life.
  one.RemoveJob("a", 10);
  one.Advance(3 * h);
  CHECK(one.usage("a") == doctest::Approx(expect / 2).epsilon(1e-12));
  one.Advance(h);  // the past does nothing
  CHECK(one.usage("a") == doctest::Approx(expect / 2).epsilon(1e-12));
}

TEST_CASE("quota: fairshare keys are usage over shares per level of the path") {
  QuotaLedger q(1'000'000 * kHour);  // decay negligible over the test
  q.Configure(Tenant("org", 0, -1, 0, 0, 2.0));
  q.Configure(Tenant("org/x", 0, -1, 0, 0, 1.0));
  q.Configure(Tenant("org/y", 0, -1, 0, 0, 4.0));
  q.AddJob("org/x", 30);
  q.AddJob("org/y", 10);
  q.AddJob("lab", 20);
  q.Advance(kHour);
  const double ux = q.usage("org/x"), uy = q.usage("org/y"), ul = q.usage("lab");
  CHECK(ux == doctest::Approx(3 * uy));
  CHECK(ul == doctest::Approx(2 * uy));
  QuotaLedger::FairshareView fs = q.Fairshare();
  // org: (x + y) / 2 = 2 uy; org/x: ux / 1 = 3 uy; org/y: uy / 4; lab: 2 uy / 1.
  const std::vector<double>& kx = fs.KeyOf("org/x");
  const std::vector<double>& ky = fs.KeyOf("org/y");
  const std::vector<double>& kl = fs.KeyOf("lab");
  REQUIRE(kx.size() == 2);
  CHECK(kx[0] == doctest::Approx(2 * uy));
  CHECK(kx[1] == doctest::Approx(3 * uy));
  CHECK(ky[1] == doctest::Approx(uy / 4));
  REQUIRE(kl.size() == 1);
  CHECK(kl[0] == doctest::Approx(2 * uy));
  // y is further below its share than x; lab ties org at the first level.
  CHECK(ky < kx);
  CHECK(fs.KeyOf("new/tenant") == std::vector<double>{0.0, 0.0});
  CHECK(TenantPathPrefixes("a/b/c") == std::vector<std::string>{"a", "a/b", "a/b/c"});
}

TEST_CASE("quota: a tenant's limits in one partition hold it there alone, naming the partition") {
  QuotaLedger q(kHour);
  TenantConfig a = Tenant("org/a", 0);
  a.partitions["gb200"] = {.max_gpus = 64, .max_job_gpus = 32, .max_running_jobs = 3};
  q.Configure(a);
  // Larger than its jobs may be there; anywhere else (or with no partition)
  // nothing limits it.
  CHECK(q.Block("org/a", 40, 40, "gb200") ==
        "quota: the job asks for 40 GPUs, over tenant 'org/a' max_job_gpus 32 in partition "
        "'gb200'");
  CHECK(q.Block("org/a", 40, 40, "h100").empty());
  CHECK(q.Block("org/a", 40, 40).empty());
  // 32 + 24 held there: 8 more fit in 64, 16 do not.
  q.AddJob("org/a", 32, "gb200");
  q.AddJob("org/a", 24, "gb200");
  q.AddJob("org/a", 16, "h100");
  CHECK(q.gpus("org/a") == 72);  // the cluster-wide count has them all
  CHECK(q.running("org/a") == 3);
  CHECK(q.partition_use("org/a") ==
        std::map<std::string, QuotaLedger::PartitionUse>{{"gb200", {56, 2}}, {"h100", {16, 1}}});
  CHECK(q.Block("org/a", 8, 8, "gb200").empty());
  CHECK(q.Block("org/a", 16, 16, "gb200") ==
        "quota: tenant 'org/a' holds 56 of its 64 GPUs in partition 'gb200' (max_gpus); the job "
        "would hold 16 more");
  // Spares count: 8 ranks holding 16 GPUs do not fit either.
  CHECK(q.Block("org/a", 8, 16, "gb200").find("holds 56 of its 64") != std::string::npos);
  CHECK(q.Block("org/a", 16, 16, "h100").empty());
  // A third job there: the running-jobs limit comes before the GPUs.
  q.AddJob("org/a", 8, "gb200");
  CHECK(q.Block("org/a", 1, 1, "gb200") ==
        "quota: tenant 'org/a' already runs 3 jobs in partition 'gb200', its max_running_jobs "
        "there");
  // A stop frees exactly what the job held there.
  q.RemoveJob("org/a", 32, "gb200");
  CHECK(q.partition_use("org/a").at("gb200") == QuotaLedger::PartitionUse{32, 2});
  CHECK(q.Block("org/a", 32, 32, "gb200").empty());
  q.RemoveJob("org/a", 24, "gb200");
  q.RemoveJob("org/a", 8, "gb200");
  q.RemoveJob("org/a", 16, "h100");
  CHECK(q.partition_use("org/a").empty());  // nothing held: no entries left
  CHECK(q.gpus("org/a") == 0);
  // The cluster-wide limits come first.
  a.max_job_gpus = 16;
  q.Configure(a);
  CHECK(q.Block("org/a", 40, 40, "gb200") ==
        "quota: the job asks for 40 GPUs, over tenant 'org/a' max_job_gpus 16");
  // Another tenant is not limited by org/a's.
  CHECK(q.Block("org/b", 40, 40, "gb200").empty());
}

TEST_CASE("quota: per-partition limits are checked at the boundary, naming the field") {
  CHECK(ValidatePartitionLimits({}).ok());
  CHECK(ValidatePartitionLimits({{"gb200", {64, 0, 0}}, {"a.b_c-9", {}}}).ok());
  struct Row {
    std::string name;
    PartitionLimits limits;
    std::string field, words;
  };
  const Row rows[] = {
      {"", {}, "partitions", "a name is 1 to 64"},
      {"-gb", {}, "partitions", "may not start with '-' or '.'"},
      {"gb 200", {}, "partitions", "outside A-Z a-z 0-9 . _ -"},
      {std::string(65, 'p'), {}, "partitions", "a name is 1 to 64"},
      {"gb",
       {-1, 0, 0},
       "partitions.gb.max_gpus",
       "-1 is out of range; use 0 (no limit)..100000000"},
      {"gb", {0, 100'000'001, 0}, "partitions.gb.max_job_gpus", "out of range"},
      {"gb", {0, 0, -5}, "partitions.gb.max_running_jobs", "out of range"},
  };
  for (const Row& r : rows) {
    CAPTURE(r.name);
    Status s = ValidatePartitionLimits({{r.name, r.limits}});
    REQUIRE_FALSE(s.ok());
    CHECK(s.field() == r.field);
    CHECK_MESSAGE(s.message().find(r.words) != std::string::npos, s.message());
  }
  std::map<std::string, PartitionLimits> many;
  for (size_t i = 0; i <= kMaxTenantPartitions; ++i) many["p" + std::to_string(i)] = {1, 0, 0};
  Status s = ValidatePartitionLimits(many);
  CHECK(s.code() == ErrorCode::kTooLarge);
  CHECK(s.message().find("at most 1000 partitions") != std::string::npos);
  many.erase("p0");
  CHECK(ValidatePartitionLimits(many).ok());
}

TEST_CASE("UsageAt: what Advance would give, without advancing") {
  const TimeMs half_life = 10 * kHour;
  QuotaLedger a(half_life), b(half_life);
  for (QuotaLedger* l : {&a, &b}) {
    l->Configure({.name = "t"});
    l->AddJob("t", 8);
    l->Advance(kHour);
  }
  const double at_1h = a.usage("t");
  CHECK(at_1h > 0);
  // A read at or before the last Advance is usage(); a later one projects.
  CHECK(a.UsageAt("t", kHour) == at_1h);
  CHECK(a.UsageAt("t", 0) == at_1h);
  b.Advance(3 * kHour);
  CHECK(a.UsageAt("t", 3 * kHour) == doctest::Approx(b.usage("t")).epsilon(1e-12));
  CHECK(a.usage("t") == at_1h);  // nothing changed
  // Nothing held: only the decay, half after one half-life.
  a.RemoveJob("t", 8);
  CHECK(a.UsageAt("t", kHour + half_life) == doctest::Approx(at_1h / 2));
  CHECK(a.UsageAt("nobody", 5 * kHour) == 0);
}
