// Topology JSON, version 1 (schema/topology.schema.json, docs/formats.md).

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_util.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;
using core::TopologyBuilder;
using internal::Child;
using internal::Index;
using internal::Json;
using internal::OrderedJson;
using internal::PathError;

constexpr int kFormatVersion = 1;

struct NodeDefaults {
  int gpus = 8;
  std::string gpu_model;
};

class JsonTopologyReader {
 public:
  Result<core::Topology> Read(const Json& root);

 private:
  Status ReadTiers(const Json& tiers);
  Status ReadLink(const Json& object, const std::string& path, int tier);
  // hbd_above: the domain marked as an HBD above this one, as '"name" (path)';
  // empty when there is none.
  Status ReadDomain(const Json& domain, const std::string& path, int tier, int parent,
                    const std::string& hbd_above);
  Status ReadNodes(const Json& nodes, const std::string& path, int parent);
  Status ReadNode(const Json& node, const std::string& path, int parent);
  Status ClaimName(const std::string& name, const std::string& path);

  std::vector<std::string> tier_names_;
  std::vector<std::pair<int, double>> tier_costs_;
  std::vector<std::pair<int, core::TierLink>> tier_links_;
  std::vector<std::pair<int, std::string>> link_objects_;  // tier, path: read once hbd is known
  int hbd_ = 0;
  NodeDefaults defaults_;
  std::unordered_map<std::string, std::string> name_paths_;  // name -> where first used
  std::unique_ptr<TopologyBuilder> builder_;
};

Status JsonTopologyReader::ClaimName(const std::string& name, const std::string& path) {
  auto [it, inserted] = name_paths_.emplace(name, path);
  if (!inserted) {
    return PathError(path, "name \"" + name + "\" is already used at " + it->second +
                               "; domain and node names must be unique");
  }
  return Status::Ok();
}

// The link fields of `object` that it gives ("bandwidth_gbs", "latency_us",
// "oversubscription") into link; the others keep their value. *any says
// whether one was given.
Status ReadLinkFields(const Json& object, const std::string& path, core::TierLink& link,
                      bool* any) {
  for (auto [key, field] : {std::pair<const char*, double*>{"bandwidth_gbs", &link.bandwidth_gbs},
                            {"latency_us", &link.latency_us},
                            {"oversubscription", &link.oversubscription}}) {
    if (!object.contains(key)) continue;
    const Json& v = object.at(key);
    const double lo = std::string_view(key) == "oversubscription" ? 1 : 0;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
        v.get<double>() <= 0 || v.get<double>() >= 1e9) {
      return PathError(path, "\"" + std::string(key) + "\" must be a number " +
                                 (lo > 0 ? "1" : "above 0") + " .. 1e9 (got " + internal::Shown(v) +
                                 ")");
    }
    *field = v.get<double>();
    *any = true;
  }
  return Status::Ok();
}

// "bandwidth_gbs" and "latency_us" of a tier object (or of "cluster_link"),
// each optional; the other keeps its default.
Status JsonTopologyReader::ReadLink(const Json& object, const std::string& path, int tier) {
  const int tiers = static_cast<int>(tier_names_.size());
  core::TierLink link = core::DefaultTierLink(tier, hbd_);
  bool any = false;
  if (Status s = ReadLinkFields(object, path, link, &any); !s.ok()) return s;
  if (any) tier_links_.emplace_back(tier <= tiers ? tier : tiers, link);
  return Status::Ok();
}

// The "link" of a domain marked "hbd": true: the scale-up fabric inside that
// HBD. Bandwidth and latency are required, the oversubscription defaults to 1.
Result<core::TierLink> ReadHbdLink(const Json& object, const std::string& path) {
  if (!object.is_object()) {
    return PathError(path, "must be an object {\"bandwidth_gbs\": ..., \"latency_us\": ...} (got " +
                               internal::Shown(object) + ")");
  }
  if (Status s =
          internal::CheckFields(object, path, {"bandwidth_gbs", "latency_us", "oversubscription"});
      !s.ok()) {
    return s;
  }
  for (const char* key : {"bandwidth_gbs", "latency_us"}) {
    if (!object.contains(key)) {
      return PathError(path, "\"" + std::string(key) + "\" is required in the link of an HBD");
    }
  }
  core::TierLink link;
  bool any = false;
  if (Status s = ReadLinkFields(object, path, link, &any); !s.ok()) return s;
  return link;
}

Status JsonTopologyReader::ReadTiers(const Json& tiers) {
  if (!tiers.is_array() || tiers.empty()) {
    return PathError("tiers",
                     "must be a non-empty array of tier names, innermost first, e.g. "
                     "[\"node\", \"leaf\", \"spine\"]");
  }
  if (tiers.size() > static_cast<size_t>(kMaxTiers)) {
    return PathError("tiers", "at most " + std::to_string(kMaxTiers) + " tiers (got " +
                                  std::to_string(tiers.size()) + ")");
  }
  for (size_t i = 0; i < tiers.size(); ++i) {
    std::string path = Index("tiers", i);
    const Json& t = tiers[i];
    std::string name;
    if (t.is_string()) {
      name = t.get<std::string>();
    } else if (t.is_object()) {
      if (Status s = internal::CheckFields(
              t, path, {"name", "cost", "bandwidth_gbs", "latency_us", "oversubscription"});
          !s.ok()) {
        return s;
      }
      if (!t.contains("name")) return PathError(path, "\"name\" is required");
      Result<std::string> n = internal::GetString(t, path, "name", false);
      if (!n.ok()) return n.status();
      name = n.value();
      if (t.contains("cost")) {
        const Json& c = t.at("cost");
        if (!c.is_number() || !std::isfinite(c.get<double>()) || c.get<double>() <= 0) {
          return PathError(path,
                           "\"cost\" must be a positive number (got " + internal::Shown(c) + ")");
        }
        tier_costs_.emplace_back(static_cast<int>(i), c.get<double>());
      }
      if (t.contains("bandwidth_gbs") || t.contains("latency_us") ||
          t.contains("oversubscription")) {
        link_objects_.emplace_back(static_cast<int>(i), path);
      }
    } else {
      return PathError(path, "a tier is a name or {\"name\": ..., \"cost\": ...} (got " +
                                 internal::Shown(t) + ")");
    }
    if (name.empty()) return PathError(path, "tier name must not be empty");
    if (std::find(tier_names_.begin(), tier_names_.end(), name) != tier_names_.end()) {
      return PathError(path, "tier \"" + name + "\" is listed twice");
    }
    tier_names_.push_back(std::move(name));
  }
  return Status::Ok();
}

Result<core::Topology> JsonTopologyReader::Read(const Json& root) {
  if (!root.is_object()) return PathError("", "a topology is a JSON object");
  if (Status s = internal::CheckFields(root, "",
                                       {"version", "name", "tiers", "hbd", "cluster_link",
                                        "gpus_per_node", "gpu_model", "domains", "nodes"});
      !s.ok()) {
    return s;
  }
  if (!root.contains("version")) return PathError("", "\"version\" is required (1)");
  if (!root.at("version").is_number_integer() || root.at("version").get<int64_t>() != 1) {
    return PathError("", "\"version\" must be " + std::to_string(kFormatVersion) + " (got " +
                             internal::Shown(root.at("version")) + ")");
  }
  if (!root.contains("name")) return PathError("", "\"name\" is required");
  Result<std::string> name = internal::GetString(root, "", "name", false);
  if (!name.ok()) return name.status();
  if (!root.contains("tiers")) return PathError("", "\"tiers\" is required");
  if (Status s = ReadTiers(root.at("tiers")); !s.ok()) return s;

  int hbd = 0;
  if (root.contains("hbd")) {
    Result<std::string> h = internal::GetString(root, "", "hbd", false);
    if (!h.ok()) return h.status();
    auto it = std::find(tier_names_.begin(), tier_names_.end(), h.value());
    if (it == tier_names_.end()) {
      return PathError("", "\"hbd\" names tier \"" + h.value() + "\", which is not in \"tiers\"");
    }
    hbd = static_cast<int>(it - tier_names_.begin());
  }
  hbd_ = hbd;
  const Json& tiers_json = root.at("tiers");
  for (const auto& [tier, path] : link_objects_) {
    if (Status s = ReadLink(tiers_json[static_cast<size_t>(tier)], path, tier); !s.ok()) return s;
  }
  if (root.contains("cluster_link")) {
    const Json& c = root.at("cluster_link");
    if (!c.is_object()) {
      return PathError("cluster_link",
                       "must be an object {\"bandwidth_gbs\": ..., \"latency_us\": ...}");
    }
    if (Status s = internal::CheckFields(c, "cluster_link",
                                         {"bandwidth_gbs", "latency_us", "oversubscription"});
        !s.ok()) {
      return s;
    }
    if (Status s = ReadLink(c, "cluster_link", static_cast<int>(tier_names_.size())); !s.ok()) {
      return s;
    }
  }
  if (root.contains("gpus_per_node")) {
    Result<int64_t> g = internal::GetInt(root, "", "gpus_per_node", 1, core::kMaxGpusPerNode);
    if (!g.ok()) return g.status();
    defaults_.gpus = static_cast<int>(g.value());
  }
  if (root.contains("gpu_model")) {
    Result<std::string> m = internal::GetString(root, "", "gpu_model", true);
    if (!m.ok()) return m.status();
    defaults_.gpu_model = m.value();
  }

  builder_ = std::make_unique<TopologyBuilder>(name.value(), tier_names_, hbd);
  for (const auto& [tier, cost] : tier_costs_) builder_->SetTierCost(tier, cost);
  for (const auto& [tier, link] : tier_links_) builder_->SetTierLink(tier, link);

  int top = static_cast<int>(tier_names_.size()) - 1;
  if (top == 0) {
    if (root.contains("domains")) {
      return PathError("", "with only the node tier, list \"nodes\", not \"domains\"");
    }
    if (!root.contains("nodes")) return PathError("", "\"nodes\" is required");
    if (Status s = ReadNodes(root.at("nodes"), "nodes", TopologyBuilder::kTop); !s.ok()) {
      return s;
    }
  } else {
    if (root.contains("nodes")) {
      return PathError("", "nodes go inside \"" + tier_names_[1] +
                               "\" domains; the top level lists \"domains\" of tier \"" +
                               tier_names_[top] + "\"");
    }
    if (!root.contains("domains")) return PathError("", "\"domains\" is required");
    const Json& domains = root.at("domains");
    if (!domains.is_array() || domains.empty()) {
      return PathError("domains",
                       "must be a non-empty array of \"" + tier_names_[top] + "\" domains");
    }
    for (size_t i = 0; i < domains.size(); ++i) {
      Status s = ReadDomain(domains[i], Index("domains", i), top, TopologyBuilder::kTop, "");
      if (!s.ok()) return s;
    }
  }
  Result<core::Topology> topology = std::move(*builder_).Build();
  if (!topology.ok()) return Status::Error("topology: " + topology.message());
  return topology;
}

Status JsonTopologyReader::ReadDomain(const Json& domain, const std::string& path, int tier,
                                      int parent, const std::string& hbd_above) {
  const std::string& tier_name = tier_names_[tier];
  std::string_view list_key = tier == 1 ? "nodes" : "children";
  std::string_view wrong_key = tier == 1 ? "children" : "nodes";
  if (!domain.is_object()) {
    return PathError(path, "a \"" + tier_name + "\" domain is an object {\"name\": ..., \"" +
                               std::string(list_key) + "\": [...]}");
  }
  if (domain.contains(wrong_key)) {
    return PathError(path, "a \"" + tier_name + "\" domain lists \"" + std::string(list_key) +
                               "\", not \"" + std::string(wrong_key) + "\"");
  }
  if (Status s = internal::CheckFields(domain, path, {"name", "tier", list_key, "hbd", "link"});
      !s.ok()) {
    return s;
  }
  if (!domain.contains("name")) return PathError(path, "\"name\" is required");
  Result<std::string> name = internal::GetString(domain, path, "name", false);
  if (!name.ok()) return name.status();
  if (domain.contains("tier")) {
    Result<std::string> t = internal::GetString(domain, path, "tier", false);
    if (!t.ok()) return t.status();
    if (t.value() != tier_name) {
      return PathError(path, "domain \"" + name.value() + "\" says tier \"" + t.value() +
                                 "\" but sits at the depth of tier \"" + tier_name + "\"");
    }
  }
  // "hbd": true makes this domain the HBD of every node below it; "link",
  // only with it, is the scale-up fabric inside.
  bool hbd = false;
  if (domain.contains("hbd")) {
    const Json& h = domain.at("hbd");
    if (!h.is_boolean()) {
      return PathError(path, "\"hbd\" must be true or false (got " + internal::Shown(h) + ")");
    }
    hbd = h.get<bool>();
  }
  std::optional<core::TierLink> link;
  if (domain.contains("link")) {
    if (!hbd) {
      return PathError(path,
                       "\"link\" is the scale-up link inside an HBD: give it with \"hbd\": true");
    }
    Result<core::TierLink> l = ReadHbdLink(domain.at("link"), Child(path, "link"));
    if (!l.ok()) return l.status();
    link = l.value();
  }
  if (hbd && !hbd_above.empty()) {
    return PathError(path, "domain \"" + name.value() + "\" is marked as an HBD inside HBD " +
                               hbd_above + "; an HBD holds no other, mark one of them");
  }
  if (Status s = ClaimName(name.value(), path); !s.ok()) return s;
  int handle = builder_->AddDomain(name.value(), tier, parent);
  if (hbd) builder_->MarkHbd(handle, link);
  const std::string inner_above = hbd ? "\"" + name.value() + "\" (" + path + ")" : hbd_above;

  std::string list_path = Child(path, list_key);
  if (!domain.contains(list_key)) {
    return PathError(path, "\"" + std::string(list_key) + "\" is required");
  }
  const Json& list = domain.at(std::string(list_key));
  if (tier == 1) return ReadNodes(list, list_path, handle);
  if (!list.is_array() || list.empty()) {
    return PathError(list_path,
                     "must be a non-empty array of \"" + tier_names_[tier - 1] + "\" domains");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (Status s = ReadDomain(list[i], Index(list_path, i), tier - 1, handle, inner_above);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status JsonTopologyReader::ReadNodes(const Json& nodes, const std::string& path, int parent) {
  if (!nodes.is_array() || nodes.empty()) {
    return PathError(path, "must be a non-empty array of node names or node objects");
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (Status s = ReadNode(nodes[i], Index(path, i), parent); !s.ok()) return s;
  }
  return Status::Ok();
}

Status JsonTopologyReader::ReadNode(const Json& node, const std::string& path, int parent) {
  std::string name;
  int gpus = defaults_.gpus;
  std::string model = defaults_.gpu_model;
  std::vector<std::string> features;
  std::string name_path = path;
  if (node.is_string()) {
    name = node.get<std::string>();
    if (name.empty()) return PathError(path, "node name must not be empty");
  } else if (node.is_object()) {
    if (Status s = internal::CheckFields(node, path, {"name", "gpus", "gpu_model", "features"});
        !s.ok()) {
      return s;
    }
    if (!node.contains("name")) return PathError(path, "\"name\" is required");
    Result<std::string> n = internal::GetString(node, path, "name", false);
    if (!n.ok()) return n.status();
    name = n.value();
    name_path = Child(path, "name");
    if (node.contains("gpus")) {
      Result<int64_t> g = internal::GetInt(node, path, "gpus", 1, core::kMaxGpusPerNode);
      if (!g.ok()) return g.status();
      gpus = static_cast<int>(g.value());
    }
    if (node.contains("gpu_model")) {
      Result<std::string> m = internal::GetString(node, path, "gpu_model", true);
      if (!m.ok()) return m.status();
      model = m.value();
    }
    if (node.contains("features")) {
      const Json& f = node.at("features");
      if (!f.is_array()) return PathError(path, "\"features\" must be an array of strings");
      for (size_t i = 0; i < f.size(); ++i) {
        if (!f[i].is_string() || f[i].get<std::string>().empty()) {
          return PathError(Index(Child(path, "features"), i),
                           "a feature is a non-empty string (got " + internal::Shown(f[i]) + ")");
        }
        features.push_back(f[i].get<std::string>());
      }
    }
  } else {
    return PathError(path, "a node is a name or an object {\"name\": ..., \"gpus\": ...} (got " +
                               internal::Shown(node) + ")");
  }
  // A name no agent could register, nor an API filter name (node_name.hpp).
  if (Status s = CheckNodeName(name); !s.ok()) return PathError(name_path, s.message());
  if (Status s = ClaimName(name, path); !s.ok()) return s;
  builder_->AddNode(std::move(name), parent, gpus, std::move(model), std::move(features));
  return Status::Ok();
}

// The most common value, ties broken by first appearance.
template <typename T, typename Get>
T MostCommon(const core::Topology& topology, Get get) {
  std::map<T, int> counts;
  T best = get(topology.node(0));
  int best_count = 0;
  for (int n = 0; n < topology.node_count(); ++n) {
    T value = get(topology.node(n));
    int c = ++counts[value];
    if (c > best_count) {
      best = value;
      best_count = c;
    }
  }
  return best;
}

OrderedJson NodeToJson(const core::Node& node, const NodeDefaults& defaults) {
  if (node.gpus == defaults.gpus && node.gpu_model == defaults.gpu_model && node.features.empty()) {
    return node.name;
  }
  OrderedJson j;
  j["name"] = node.name;
  if (node.gpus != defaults.gpus) j["gpus"] = node.gpus;
  if (node.gpu_model != defaults.gpu_model) j["gpu_model"] = node.gpu_model;
  if (!node.features.empty()) j["features"] = node.features;
  return j;
}

OrderedJson DomainToJson(const core::Topology& topology, core::DomainId d,
                         const NodeDefaults& defaults) {
  const core::Domain& domain = topology.domain(d);
  OrderedJson j;
  j["name"] = domain.name;
  if (topology.hbd_marked(d)) {
    j["hbd"] = true;
    if (std::optional<core::TierLink> link = topology.hbd_link(d)) {
      OrderedJson l;
      l["bandwidth_gbs"] = link->bandwidth_gbs;
      l["latency_us"] = link->latency_us;
      if (link->oversubscription != 1) l["oversubscription"] = link->oversubscription;
      j["link"] = std::move(l);
    }
  }
  OrderedJson list = OrderedJson::array();
  for (core::DomainId c : topology.children(d)) {
    if (domain.tier == 1) {
      list.push_back(NodeToJson(topology.node(c), defaults));
    } else {
      list.push_back(DomainToJson(topology, c, defaults));
    }
  }
  j[domain.tier == 1 ? "nodes" : "children"] = std::move(list);
  return j;
}

}  // namespace

Result<core::Topology> ParseTopologyJson(std::string_view text) {
  Result<Json> root = internal::ParseStrictJson(text);
  if (!root.ok()) return root.status();
  JsonTopologyReader reader;
  return reader.Read(root.value());
}

std::string TopologyToJson(const core::Topology& topology) {
  NodeDefaults defaults;
  if (topology.node_count() > 0) {
    defaults.gpus = MostCommon<int>(topology, [](const core::Node& n) { return n.gpus; });
    defaults.gpu_model =
        MostCommon<std::string>(topology, [](const core::Node& n) { return n.gpu_model; });
  }
  OrderedJson j;
  j["version"] = kFormatVersion;
  j["name"] = topology.name();
  OrderedJson tiers = OrderedJson::array();
  for (int t = 0; t < topology.tier_count(); ++t) {
    const core::Tier& tier = topology.tier(t);
    const bool default_cost = tier.cost == core::DefaultTierCost(t, topology.hbd_tier());
    const core::TierLink def = core::DefaultTierLink(t, topology.hbd_tier());
    const bool default_bw = tier.link.bandwidth_gbs == def.bandwidth_gbs;
    const bool default_lat = tier.link.latency_us == def.latency_us;
    const bool default_os = tier.link.oversubscription == def.oversubscription;
    if (default_cost && default_bw && default_lat && default_os) {
      tiers.push_back(tier.name);
      continue;
    }
    OrderedJson o{{"name", tier.name}};
    if (!default_cost) o["cost"] = tier.cost;
    if (!default_bw) o["bandwidth_gbs"] = tier.link.bandwidth_gbs;
    if (!default_lat) o["latency_us"] = tier.link.latency_us;
    if (!default_os) o["oversubscription"] = tier.link.oversubscription;
    tiers.push_back(std::move(o));
  }
  j["tiers"] = std::move(tiers);
  j["hbd"] = topology.tier(topology.hbd_tier()).name;
  {
    const core::TierLink& root = topology.tier(topology.root_tier()).link;
    const core::TierLink def = core::DefaultTierLink(topology.root_tier(), topology.hbd_tier());
    OrderedJson o = OrderedJson::object();
    if (root.bandwidth_gbs != def.bandwidth_gbs) o["bandwidth_gbs"] = root.bandwidth_gbs;
    if (root.latency_us != def.latency_us) o["latency_us"] = root.latency_us;
    if (root.oversubscription != def.oversubscription) {
      o["oversubscription"] = root.oversubscription;
    }
    if (!o.empty()) j["cluster_link"] = std::move(o);
  }
  j["gpus_per_node"] = defaults.gpus;
  j["gpu_model"] = defaults.gpu_model;
  OrderedJson top = OrderedJson::array();
  for (core::DomainId d : topology.children(topology.root())) {
    if (topology.tier_count() == 1) {
      top.push_back(NodeToJson(topology.node(d), defaults));
    } else {
      top.push_back(DomainToJson(topology, d, defaults));
    }
  }
  j[topology.tier_count() == 1 ? "nodes" : "domains"] = std::move(top);
  return internal::WriteCompact(j);
}

}  // namespace topo::common

namespace topo::common {

core::Result<TopologyFormat> ParseTopologyFormat(std::string_view name) {
  if (name == "json") return TopologyFormat::kJson;
  if (name == "slurm") return TopologyFormat::kSlurm;
  if (name == "crux") return TopologyFormat::kCrux;
  return core::Status::Error("unknown topology format \"" + std::string(name) +
                             "\"; use json, slurm or crux");
}

TopologyFormat SniffTopologyFormat(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return TopologyFormat::kSlurm;
  text.remove_prefix(first);
  if (text.front() == '{') return TopologyFormat::kJson;
  std::string head(text.substr(0, 6));
  for (char& c : head) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (head == "ip,dsw") return TopologyFormat::kCrux;
  return TopologyFormat::kSlurm;
}

}  // namespace topo::common
