#include "commands/options.hpp"

#include <algorithm>
#include <iostream>

#include "commands/commands.hpp"
#include "topo/core/cluster_state.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::cli {

void AddTopologyFlags(CLI::App& cmd, common::TopologySource* source,
                      const std::string& format_flag) {
  std::string names;
  for (const std::string& n : common::ReferenceTopologyNames()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  auto* file = cmd.add_option("--topology", source->file,
                              "Topology file: toposched JSON, Slurm topology.conf or Crux CSV");
  cmd.add_option(format_flag, source->format,
                 "Format of --topology: json, slurm or crux (default: guessed from content)")
      ->check(CLI::IsMember({"json", "slurm", "crux"}));
  auto* gen = cmd.add_option("--generate", source->generate, "Reference topology: " + names);
  file->excludes(gen);
  cmd.add_option("--gpus-per-node", source->gpus_per_node,
                 "GPUs per node (Slurm files have none; overrides a generator's)")
      ->check(CLI::Range(1, 64));
}

int Fail(const std::string& message) {
  std::cerr << "topo: " << message << "\n";
  return kExitError;
}

CLI::Validator OneOfList(std::vector<std::string> allowed, std::string what) {
  return CLI::Validator(
      [allowed = std::move(allowed), what = std::move(what)](std::string& value) -> std::string {
        size_t start = 0;
        while (start <= value.size()) {
          size_t comma = value.find(',', start);
          if (comma == std::string::npos) comma = value.size();
          const std::string item = value.substr(start, comma - start);
          if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
            std::string list;
            for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
            return "'" + item + "' is not " + what + "; use one or more of " + list +
                   ", comma-separated";
          }
          start = comma + 1;
        }
        return std::string();
      },
      "LIST");
}

std::string NearestName(std::string_view typed, const std::vector<std::string>& names) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  if (typed.empty() || typed.size() > 64) return "";
  const size_t limit = std::max<size_t>(2, typed.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& n : names) {
    size_t d = distance(typed, n);
    if (typed.size() >= 3 && n.rfind(typed, 0) == 0) d = std::min<size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return best;
}

namespace {

// The deepest subcommand of `app` that parsed.
CLI::App* DeepestParsed(CLI::App& app) {
  CLI::App* at = &app;
  for (std::vector<CLI::App*> parsed = at->get_subcommands(); !parsed.empty();
       parsed = at->get_subcommands()) {
    at = parsed.front();
  }
  return at;
}

// "topo token create" for the subcommand `at`.
std::string CommandPath(const CLI::App* at) {
  std::string path;
  for (; at != nullptr; at = at->get_parent()) {
    path = at->get_parent() == nullptr ? "topo" + path : " " + at->get_name() + path;
  }
  return path;
}

}  // namespace

std::string UsageError(CLI::App& app, const std::string& what) {
  std::string message = what;
  // One line: CLI11's messages may end in a newline or hold one.
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  while (!message.empty() && message.back() == ' ') message.pop_back();
  return message + " (" + CommandPath(DeepestParsed(app)) + " --help)";
}

std::string SuggestForUnknown(CLI::App& app, const std::vector<std::string>& args) {
  // The deepest subcommand that parsed, and what it accepts.
  CLI::App* at = &app;
  size_t start = 0;  // the first word after the verbs that parsed
  for (;;) {
    std::vector<CLI::App*> parsed = at->get_subcommands();
    if (parsed.empty()) break;
    at = parsed.front();
    auto it =
        std::find(args.begin() + static_cast<std::ptrdiff_t>(start), args.end(), at->get_name());
    if (it != args.end()) start = static_cast<size_t>(it - args.begin()) + 1;
  }
  std::vector<std::string> verbs;
  for (const CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) {
    verbs.push_back(sub->get_name());
  }
  std::vector<std::string> flags;
  for (const CLI::App* a = at; a != nullptr; a = a->get_parent()) {
    for (const CLI::Option* o : a->get_options()) {
      for (const std::string& l : o->get_lnames()) flags.push_back("--" + l);
    }
  }
  const std::string where = CommandPath(at);
  for (size_t i = start; i < args.size(); ++i) {
    std::string word = args[i];
    if (word == "--") break;
    if (word.rfind("--", 0) == 0) {
      word = word.substr(0, word.find('='));
      if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
      const std::string near = NearestName(word, flags);
      return "'" + word + "' is not a flag of " + where +
             (near.empty() ? "" : "; did you mean '" + near + "'?") + " (" + where + " --help)";
    }
    if (word.empty() || word[0] == '-' || verbs.empty()) continue;
    // A word where a verb is expected: the first positional of a command
    // that has verbs.
    if (std::find(verbs.begin(), verbs.end(), word) != verbs.end()) return "";
    if (i > start && args[i - 1].rfind("--", 0) == 0 &&
        args[i - 1].find('=') == std::string::npos) {
      continue;  // a flag's value
    }
    const std::string near = NearestName(word, verbs);
    return "'" + word + "' is not a " + where + " command" +
           (near.empty() ? "" : "; did you mean '" + near + "'?") + " (" + where + " --help)";
  }
  return "";
}

std::vector<std::string> NodeStateNames() {
  std::vector<std::string> names;
  for (int s = 0; s <= static_cast<int>(core::NodeState::kSuspect); ++s) {
    names.emplace_back(core::NodeStateName(static_cast<core::NodeState>(s)));
  }
  return names;
}

std::vector<std::string> JobStateNames() {
  std::vector<std::string> names;
  for (int s = 0; s <= static_cast<int>(core::JobState::kRejected); ++s) {
    names.emplace_back(core::JobStateName(static_cast<core::JobState>(s)));
  }
  return names;
}

}  // namespace topo::cli
