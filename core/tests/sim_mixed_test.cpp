// Workload M (mixed clusters), mixed-10k's homogeneous twin h100-10k, and
// the replay of jobs that name GPU types.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <string>

#include "test_util.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"

using namespace topo::core;
using testing::MakeJob;

namespace {

Topology Generate(const char* name) { return std::move(GenerateTopology(name)).value(); }

int64_t ModelGpus(const Topology& t, const std::string& model) {
  int64_t gpus = 0;
  for (NodeId n = 0; n < t.node_count(); ++n) {
    if (t.node(n).gpu_model == model) gpus += t.node(n).gpus;
  }
  return gpus;
}

// The bits of SimJobResult::gpu_models for a list of model names.
uint64_t ModelBits(const Topology& t, const std::vector<std::string>& models) {
  uint64_t bits = 0;
  for (const std::string& m : models) {
    for (size_t i = 0; i < t.gpu_models().size(); ++i) {
      if (t.gpu_models()[i] == m) bits |= uint64_t{1} << i;
    }
  }
  return bits;
}

}  // namespace

TEST_CASE("workload M: deterministic per seed, the documented shares, sizes and layouts") {
  const Topology topo = Generate("mixed-10k");
  MixedOptions options;
  options.jobs = 4000;
  const SimWorkload w = GenerateMixed(topo, options);
  REQUIRE(w.jobs.size() == 4000);
  CHECK(w.name == "M");
  REQUIRE(w.tenants.size() == 4);
  int guaranteed = 0;
  for (const TenantConfig& t : w.tenants) guaranteed += t.guaranteed_gpus;
  CHECK(guaranteed == topo.total_gpus());
  CHECK(OfferedLoad(w.jobs, topo.total_gpus()) == doctest::Approx(0.9).epsilon(0.001));

  std::map<int, int> sizes;
  std::map<std::string, int> one_small;  // one-type jobs of <= 256 GPUs (every model holds them)
  std::set<std::vector<std::string>> sets_small;
  int one = 0, several = 0, none = 0, with_pp = 0, moe = 0;
  std::set<std::string> tenants;
  for (const SimJob& j : w.jobs) {
    const JobSpec& s = j.request.spec;
    CAPTURE(j.index);
    REQUIRE(ValidateJobSpec(s).ok());
    ++sizes[s.gpus];
    tenants.insert(j.request.tenant);
    CHECK(s.parallelism.tp == (s.gpus >= 8 ? 8 : 1));
    CHECK(s.parallelism.pp == (s.gpus >= 256 ? 4 : 1));
    with_pp += s.parallelism.pp > 1;
    if (s.parallelism.ep > 1) {
      ++moe;
      CHECK(s.parallelism.ep == 8);
      CHECK(s.parallelism.pp == 4);
      // An NVL72 rack holds a 64-GPU EP block: the default (auto) stands.
      CHECK(s.constraint(GroupKind::kEp).strength == Strength::kAuto);
    }
    CHECK(j.duration >= kMinute);
    CHECK(j.duration <= 7 * 24 * kHour);
    const std::vector<std::string>& types = s.selection.gpu_types;
    if (types.empty()) {
      ++none;
    } else if (types.size() == 1) {
      ++one;
      CHECK(ModelGpus(topo, types[0]) >= s.gpus);  // a model that holds it
      if (s.gpus <= 256) ++one_small[types[0]];
    } else {
      ++several;
      int64_t held = 0;
      for (const std::string& m : types) held += ModelGpus(topo, m);
      CHECK(held >= s.gpus);  // together they hold it
      CHECK(std::set<std::string>(types.begin(), types.end()).size() == types.size());
      if (s.gpus <= 256) sets_small.insert(types);
    }
  }
  // 40 % one type, 20 % several, 40 % none.
  CHECK(one / 4000.0 == doctest::Approx(0.4).epsilon(0.075));
  CHECK(several / 4000.0 == doctest::Approx(0.2).epsilon(0.15));
  CHECK(none / 4000.0 == doctest::Approx(0.4).epsilon(0.075));
  // One type: in proportion to the models' GPUs (H100 holds 95 %).
  const int small = one_small["H100"] + one_small["GB200"] + one_small["A100"];
  CHECK(one_small["H100"] > 0.9 * small);
  CHECK(one_small["GB200"] > 0);
  CHECK(one_small["A100"] > 0);
  // Several: every set of two or more models holds a small job.
  CHECK(sets_small.size() == 4);
  // Sizes: the Kalos histogram (512 GPUs: 84 of 319 jobs).
  for (const auto& size : sizes) {
    const int gpus = size.first;  // a plain name: a lambda may not capture a structured binding
    CAPTURE(gpus);
    CHECK(std::any_of(std::begin(kMixedSizes), std::end(kMixedSizes),
                      [&](const MixedSize& m) { return m.gpus == gpus; }));
  }
  CHECK(sizes[512] / 4000.0 == doctest::Approx(84.0 / 319).epsilon(0.12));
  CHECK(sizes[1] / 4000.0 == doctest::Approx(29.0 / 319).epsilon(0.2));
  CHECK(moe == doctest::Approx(with_pp / 3.0).epsilon(0.15));
  CHECK(tenants.size() == 4);

  // The same seed gives the same jobs, another seed others.
  const SimWorkload again = GenerateMixed(topo, options);
  options.seed = 2;
  const SimWorkload other = GenerateMixed(topo, options);
  bool same = true, differs = false;
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const SimJob& a = w.jobs[i];
    const SimJob& b = again.jobs[i];
    same = same && a.submit == b.submit && a.duration == b.duration &&
           a.request.spec == b.request.spec && a.request.tenant == b.request.tenant;
    differs = differs || other.jobs[i].request.spec.gpus != a.request.spec.gpus ||
              other.jobs[i].request.spec.selection != a.request.spec.selection;
  }
  CHECK(same);
  CHECK(differs);
}

TEST_CASE("workload M on a cluster of one model, and without GPU types") {
  const Topology mixed = Generate("mixed-10k");
  const Topology twin = Generate("h100-10k");
  MixedOptions options;
  options.jobs = 500;
  const SimWorkload w = GenerateMixed(mixed, options);
  const SimWorkload plain = WithoutGpuTypes(w, twin, "M/h100-10k");
  CHECK(plain.name == "M/h100-10k");
  REQUIRE(plain.jobs.size() == w.jobs.size());
  CHECK(plain.tenants.size() == w.tenants.size());
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const JobSpec& s = plain.jobs[i].request.spec;
    CAPTURE(i);
    CHECK(s.selection.gpu_types.empty());
    CHECK(plain.jobs[i].submit == w.jobs[i].submit);
    CHECK(plain.jobs[i].duration == w.jobs[i].duration);
    CHECK(s.gpus == w.jobs[i].request.spec.gpus);
    CHECK(s.parallelism == w.jobs[i].request.spec.parallelism);
    if (s.parallelism.ep > 1) {
      // No 8-GPU node holds a 64-GPU block: preferred in the innermost
      // tier that holds one (su40's racks of 9 nodes, 72 GPUs).
      CHECK(s.constraint(GroupKind::kEp).strength == Strength::kPreferred);
      CHECK(s.constraint(GroupKind::kEp).tier == "rack");
    }
  }
  // Generated on the twin itself, the arrivals and sizes are the same and
  // every typed job names its one model.
  const SimWorkload on_twin = GenerateMixed(twin, options);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    CHECK(on_twin.jobs[i].submit == w.jobs[i].submit);
    CHECK(on_twin.jobs[i].request.spec.gpus == w.jobs[i].request.spec.gpus);
    for (const std::string& m : on_twin.jobs[i].request.spec.selection.gpu_types) {
      CHECK(m == "H100");
    }
  }
}

TEST_CASE("h100-10k: mixed-10k's tree and GPUs per domain, one model, one HBD kind") {
  const Topology mixed = Generate("mixed-10k");
  const Topology twin = Generate("h100-10k");
  CHECK(twin.total_gpus() == mixed.total_gpus());
  CHECK(twin.part_count() == 1);
  CHECK(twin.gpu_models() == std::vector<std::string>{"H100"});
  CHECK(twin.hbd_tier() == 0);
  CHECK(twin.node_count() == 1280 + 36 + 32);
  REQUIRE(twin.tier_count() == mixed.tier_count());
  for (int t = 1; t <= twin.tier_count(); ++t) {
    CAPTURE(t);
    REQUIRE(twin.tier_size(t) == mixed.tier_size(t));
    for (int i = 0; i < twin.tier_size(t); ++i) {
      CHECK(twin.domain(twin.tier_first(t) + i).gpus == mixed.domain(mixed.tier_first(t) + i).gpus);
    }
    CHECK(twin.tier(t).link == mixed.PartView(0).tier(t).link);
  }
  for (NodeId n = 0; n < twin.node_count(); ++n) CHECK(twin.node(n).gpus == 8);
}

TEST_CASE("replay: typed jobs run only on the models they name, toposched on one of them") {
  // Tiers node < rack < leaf: two 8-GPU H100 nodes, an NVL rack of four
  // 4-GPU GB200 nodes (marked as its HBD), two 8-GPU A100 nodes. H100 nodes
  // come first, so a first fit that ignored the types would put the A100
  // jobs there while they wait.
  TopologyBuilder b("mixed-48", {"node", "rack", "leaf"}, 0);
  const int l0 = b.AddDomain("l0", 2, TopologyBuilder::kTop);
  const int l1 = b.AddDomain("l1", 2, TopologyBuilder::kTop);
  const int l2 = b.AddDomain("l2", 2, TopologyBuilder::kTop);
  const int h = b.AddDomain("h", 1, l0);
  const int g = b.AddDomain("g", 1, l1);
  const int a = b.AddDomain("a", 1, l2);
  b.MarkHbd(g, TierLink{900, 3});
  for (int i = 0; i < 2; ++i) b.AddNode("h" + std::to_string(i), h, 8, "H100");
  for (int i = 0; i < 4; ++i) b.AddNode("g" + std::to_string(i), g, 4, "GB200");
  for (int i = 0; i < 2; ++i) b.AddNode("a" + std::to_string(i), a, 8, "A100");
  const Topology topo = std::move(b).Build().value();
  REQUIRE(topo.part_count() == 3);

  SimWorkload w;
  auto add = [&](TimeMs submit, int gpus, int tp, std::vector<std::string> types) {
    SimJob j;
    j.index = static_cast<int64_t>(w.jobs.size());
    j.submit = submit;
    j.duration = kHour;
    j.request.spec = MakeJob(gpus, tp);
    j.request.spec.selection.gpu_types = std::move(types);
    j.request.time_limit = DefaultTimeLimit(j.duration);
    w.jobs.push_back(std::move(j));
  };
  for (int i = 0; i < 3; ++i) add(0, 8, 8, {"A100"});         // the third waits
  for (int i = 0; i < 2; ++i) add(kSecond, 8, 8, {"gb200"});  // any case
  for (int i = 0; i < 3; ++i) add(2 * kSecond, 8, 8, {"H100", "A100"});
  for (int i = 0; i < 2; ++i) add(3 * kSecond, 16, 8, {"GB200", "H100"});
  add(4 * kSecond, 8, 8, {});
  add(5 * kSecond, 2, 1, {"GB200", "A100"});

  for (bool speed : {false, true}) {
    SimOptions options;
    options.speed_model = speed;
    for (const std::string& stack : SchedulerConfig::StackNames()) {
      CAPTURE(stack);
      CAPTURE(speed);
      Result<SimReport> r = RunSimulation(topo, stack, w, options);
      REQUIRE(r.ok());
      CHECK(r.value().completed == static_cast<int64_t>(w.jobs.size()));
      for (const SimJob& j : w.jobs) {
        CAPTURE(j.index);
        const SimJobResult& res = r.value().job_results[j.index];
        REQUIRE(res.gpu_models != 0);
        std::vector<std::string> named;
        for (const std::string& m : j.request.spec.selection.gpu_types) {
          named.push_back(m == "gb200" ? "GB200" : m);
        }
        if (!named.empty()) CHECK((res.gpu_models & ~ModelBits(topo, named)) == 0);
        // toposched runs every job on one part: one model.
        if (stack == "toposched") CHECK(std::popcount(res.gpu_models) == 1);
      }
      if (stack == "toposched") CHECK(r.value().cross_part_placements == 0);
    }
  }
}
