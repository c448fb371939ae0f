#include "topo/core/job.hpp"

#include <algorithm>
#include <string>

namespace topo::core {

namespace {

constexpr std::array<std::string_view, kDimCount> kDimNames = {"tp", "cp", "ep", "dp", "pp"};

int Count(const std::vector<Dim>& order, Dim d) {
  int n = 0;
  for (Dim x : order) n += (x == d);
  return n;
}

Status ValidateNames(const std::vector<std::string>& names, const char* field) {
  if (names.size() > kMaxSelectionNames) {
    return Status::Error(std::string(field) + " lists " + std::to_string(names.size()) +
                         " names; at most " + std::to_string(kMaxSelectionNames));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (n.empty() || n.size() > kMaxSelectionNameBytes) {
      return Status::Error(std::string(field) + "[" + std::to_string(i) + "] must be 1.." +
                           std::to_string(kMaxSelectionNameBytes) + " bytes");
    }
    for (unsigned char c : n) {
      if (c < 0x21 || c > 0x7e || c == ',') {
        return Status::Error(std::string(field) + "[" + std::to_string(i) +
                             "] holds a blank, a comma or a byte outside printable ASCII");
      }
    }
  }
  return Status::Ok();
}

Status ValidateSelection(const NodeSelection& s) {
  struct List {
    const std::vector<std::string>* names;
    const char* field;
  };
  for (List l :
       {List{&s.gpu_types, "gpu_types"}, List{&s.features, "features"},
        List{&s.nodelist, "nodelist"}, List{&s.exclude, "exclude"}, List{&s.avoid, "avoid"}}) {
    if (Status st = ValidateNames(*l.names, l.field); !st.ok()) return st;
  }
  if (!s.nodelist.empty() && !s.exclude.empty()) {
    std::vector<std::string> listed = s.nodelist;
    std::sort(listed.begin(), listed.end());
    for (const std::string& n : s.exclude) {
      if (std::binary_search(listed.begin(), listed.end(), n)) {
        return Status::Error("node '" + n +
                             "' is in both nodelist and exclude; leave it out of one of them");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<Dim> DefaultRankOrder() {
  std::vector<Dim> order;
  for (int d = 0; d < kDimCount; ++d) order.push_back(static_cast<Dim>(d));
  return order;
}

std::string_view GroupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kCp:
      return "cp";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kDp:
      return "dp";
  }
  return "?";
}

std::optional<GroupKind> ParseGroupKind(std::string_view name) {
  for (GroupKind k : kAllGroupKinds) {
    if (GroupKindName(k) == name) return k;
  }
  return std::nullopt;
}

double GroupKindWeight(GroupKind k) {
  switch (k) {
    case GroupKind::kTp:
      return 16;
    case GroupKind::kEp:
      return 8;
    case GroupKind::kCp:
      return 4;
    case GroupKind::kPp:
      return 2;
    case GroupKind::kDp:
      return 1;
  }
  return 1;
}

Result<std::vector<Dim>> ParseRankOrder(std::string_view text) {
  std::vector<Dim> order;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t dash = text.find('-', pos);
    std::string_view token =
        text.substr(pos, dash == std::string_view::npos ? text.npos : dash - pos);
    bool found = false;
    for (int d = 0; d < kDimCount; ++d) {
      if (kDimNames[d] == token) {
        order.push_back(static_cast<Dim>(d));
        found = true;
      }
    }
    if (!found) {
      return Status::Error("rank order '" + std::string(text) + "': unknown dimension '" +
                           std::string(token) +
                           "'; use dimensions tp, cp, ep, dp, pp joined by '-', fastest first "
                           "(default tp-cp-ep-dp-pp)");
    }
    if (dash == std::string_view::npos) break;
    pos = dash + 1;
  }
  for (int d = 0; d < kDimCount; ++d) {
    if (Count(order, static_cast<Dim>(d)) > 1) {
      return Status::Error("rank order '" + std::string(text) + "' names '" +
                           std::string(kDimNames[d]) + "' twice");
    }
  }
  return order;
}

std::string FormatRankOrder(const std::vector<Dim>& order) {
  std::string out;
  for (Dim d : order) {
    if (!out.empty()) out += '-';
    out += kDimNames[static_cast<int>(d)];
  }
  return out;
}

std::array<TierConstraint, kGroupKindCount> JobSpec::DefaultConstraints() {
  std::array<TierConstraint, kGroupKindCount> c;
  c[static_cast<int>(GroupKind::kTp)] = {Strength::kRequired, "hbd"};
  c[static_cast<int>(GroupKind::kEp)] = {Strength::kAuto, "hbd"};
  c[static_cast<int>(GroupKind::kPp)] = {Strength::kPreferred, "leaf"};
  return c;
}

Status ValidateJobSpec(const JobSpec& job) {
  const Parallelism& p = job.parallelism;
  if (job.gpus < 1) {
    return Status::Error("gpus is " + std::to_string(job.gpus) + "; a job needs at least 1 GPU");
  }
  struct Field {
    const char* name;
    int value;
  };
  for (Field f : {Field{"tp", p.tp}, Field{"cp", p.cp}, Field{"ep", p.ep}, Field{"pp", p.pp},
                  Field{"dp", p.dp}}) {
    if (f.value < 1) {
      return Status::Error(std::string("parallelism.") + f.name + " is " + std::to_string(f.value) +
                           "; every parallel degree is at least 1");
    }
  }
  long long product = 1LL * p.tp * p.cp * p.pp * p.dp;
  if (product != job.gpus) {
    return Status::Error("tp x cp x pp x dp = " + std::to_string(p.tp) + " x " +
                         std::to_string(p.cp) + " x " + std::to_string(p.pp) + " x " +
                         std::to_string(p.dp) + " = " + std::to_string(product) + ", but gpus is " +
                         std::to_string(job.gpus) +
                         "; make the product equal gpus (or leave dp out to derive it)");
  }
  if (p.dp % p.ep != 0) {
    return Status::Error("ep " + std::to_string(p.ep) + " does not divide dp " +
                         std::to_string(p.dp) +
                         "; experts are sharded over data-parallel ranks, so ep must divide dp");
  }
  const std::array<int, kDimCount> sizes = {p.tp, p.cp, p.ep, p.dp / p.ep, p.pp};
  for (int d = 0; d < kDimCount; ++d) {
    int n = Count(p.order, static_cast<Dim>(d));
    if (n > 1) {
      return Status::Error("parallelism.order names '" + std::string(kDimNames[d]) + "' twice");
    }
    if (n == 0 && sizes[d] > 1) {
      return Status::Error("parallelism.order '" + FormatRankOrder(p.order) + "' leaves out '" +
                           std::string(kDimNames[d]) + "', whose size is " +
                           std::to_string(sizes[d]) + "; list every dimension larger than 1");
    }
  }
  if (job.gpus_per_node < 0 || job.gpus_per_node > 64) {
    return Status::Error("gpus_per_node is " + std::to_string(job.gpus_per_node) +
                         "; use 1..64, or 0 for whole nodes");
  }
  if (job.spares < 0) {
    return Status::Error("spares is " + std::to_string(job.spares) + "; use 0 or more");
  }
  for (GroupKind k : kAllGroupKinds) {
    const TierConstraint& c = job.constraint(k);
    if (c.strength != Strength::kNone && c.tier.empty()) {
      return Status::Error("constraints." + std::string(GroupKindName(k)) + " names no tier");
    }
  }
  return ValidateSelection(job.selection);
}

RankLayout::RankLayout(const Parallelism& p) {
  size_ = {p.tp, p.cp, p.ep, p.dp / p.ep, p.pp};
  std::vector<Dim> order = p.order;
  for (int d = 0; d < kDimCount; ++d) {
    if (Count(order, static_cast<Dim>(d)) == 0) order.push_back(static_cast<Dim>(d));
  }
  int stride = 1;
  for (Dim d : order) {
    stride_[static_cast<int>(d)] = stride;
    stride *= size_[static_cast<int>(d)];
  }
  world_ = stride;
}

bool RankLayout::InGroup(GroupKind k, Dim d) {
  switch (k) {
    case GroupKind::kTp:
      return d == Dim::kTp;
    case GroupKind::kCp:
      return d == Dim::kCp;
    case GroupKind::kEp:
      return d == Dim::kTp || d == Dim::kCp || d == Dim::kEp;
    case GroupKind::kPp:
      return d == Dim::kPp;
    case GroupKind::kDp:
      return d == Dim::kEp || d == Dim::kDp;
  }
  return false;
}

bool RankLayout::KindActive(GroupKind k, const Parallelism& p) {
  switch (k) {
    case GroupKind::kTp:
      return p.tp > 1;
    case GroupKind::kCp:
      return p.cp > 1;
    case GroupKind::kEp:
      return p.ep > 1;
    case GroupKind::kPp:
      return p.pp > 1;
    case GroupKind::kDp:
      return p.dp > 1;
  }
  return false;
}

int RankLayout::GroupSize(GroupKind k) const {
  int s = 1;
  for (int d = 0; d < kDimCount; ++d) {
    if (InGroup(k, static_cast<Dim>(d))) s *= size_[d];
  }
  return s;
}

int RankLayout::GroupOf(GroupKind k, int rank) const {
  int id = 0, mult = 1;
  for (int d = 0; d < kDimCount; ++d) {
    if (InGroup(k, static_cast<Dim>(d))) continue;
    id += Coord(rank, static_cast<Dim>(d)) * mult;
    mult *= size_[d];
  }
  return id;
}

std::vector<int> RankLayout::GroupMembers(GroupKind k, int group) const {
  std::vector<int> out;
  out.reserve(GroupSize(k));
  for (int r = 0; r < world_; ++r) {
    if (GroupOf(k, r) == group) out.push_back(r);
  }
  return out;
}

}  // namespace topo::core
