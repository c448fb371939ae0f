// topo partition | reservation: the cluster's named node sets on a running
// topo-scheduler (docs/cli.md; docs/api.md "Partitions and reservations").
// Everyone lists and shows them; cluster-admins create and delete them.

#include <iostream>

#include "client/format.hpp"
#include "client/requests.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"

namespace topo::cli {

namespace {

using nlohmann::json;

struct SetArgs {
  std::string name;
  bool json = false;
};

// The daemon's errors about a field name the flag that set it.
void LabelSetFields(Session& session) {
  session.LabelFields([](std::string_view field) { return NodeSetFieldFlag(field); });
}

// A view of the answer, read as a client reads (absent fields keep their
// defaults); an answer that does not read is the server's error.
template <class T>
int WithView(const Reply& reply,
             core::Result<T> (*parse)(std::string_view, std::string*, api::Reading),
             const std::function<void(const T&)>& show) {
  core::Result<T> view = parse(reply.body.dump(), nullptr, api::Reading::kClient);
  if (!view.ok()) {
    std::cerr << "topo: the server's answer does not read: " << TerminalSafe(view.message())
              << "\n";
    return kExitServerError;
  }
  show(view.value());
  return kExitOk;
}

// ---- partition

int RunPartitionList(const SetArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply =
      session->Call("GET", args.name.empty() ? "/v1/partitions" : PartitionTarget(args.name));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  if (!args.name.empty()) {
    return WithView<api::PartitionView>(
        reply, &api::ParsePartitionView,
        [](const api::PartitionView& p) { std::cout << FormatPartitionDetails(p); });
  }
  return WithView<api::PartitionList>(reply, &api::ParsePartitionList,
                                      [](const api::PartitionList& l) {
                                        if (l.partitions.empty()) {
                                          std::cout << "No partitions: every job may use every "
                                                       "node (topo partition create adds one)\n";
                                        } else {
                                          std::cout << FormatPartitionTable(l.partitions);
                                        }
                                      });
}

struct PartitionCreateArgs {
  PartitionFlags flags;
  bool json = false;
};

int RunPartitionCreate(const PartitionCreateArgs& args) {
  core::Result<api::PartitionRequest> request = PartitionCreateRequest(args.flags);
  if (!request.ok()) return Fail(request.message());
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  LabelSetFields(*session);
  Reply reply = session->Call("POST", "/v1/partitions",
                              json::parse(api::WritePartitionRequest(request.value())));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  const bool created = reply.status == 201;
  return WithView<api::PartitionView>(
      reply, &api::ParsePartitionView, [&](const api::PartitionView& p) {
        std::cout << (created ? "Created" : "Replaced") << " partition " << TerminalSafe(p.name)
                  << ": " << p.node_count << (p.node_count == 1 ? " node, " : " nodes, ") << p.gpus
                  << " GPUs" << (p.is_default ? " (the default)" : "") << "\n";
      });
}

int RunPartitionDelete(const SetArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("DELETE", PartitionTarget(args.name));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "Deleted partition " << TerminalSafe(args.name) << "\n";
  }
  return kExitOk;
}

// ---- reservation

int RunReservationList(const SetArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply =
      session->Call("GET", args.name.empty() ? "/v1/reservations" : ReservationTarget(args.name));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  if (!args.name.empty()) {
    return WithView<api::ReservationView>(
        reply, &api::ParseReservationView,
        [](const api::ReservationView& r) { std::cout << FormatReservationDetails(r); });
  }
  return WithView<api::ReservationList>(
      reply, &api::ParseReservationList, [](const api::ReservationList& l) {
        if (l.reservations.empty()) {
          std::cout << "No reservations (topo reservation create adds one)\n";
        } else {
          std::cout << FormatReservationTable(l.reservations);
        }
      });
}

struct ReservationCreateArgs {
  ReservationFlags flags;
  bool json = false;
};

int RunReservationCreate(const ReservationCreateArgs& args) {
  core::Result<api::ReservationRequest> request = ReservationCreateRequest(args.flags, NowMs());
  if (!request.ok()) return Fail(request.message());
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  LabelSetFields(*session);
  Reply reply = session->Call("POST", "/v1/reservations",
                              json::parse(api::WriteReservationRequest(request.value())));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  const bool created = reply.status == 201;
  return WithView<api::ReservationView>(
      reply, &api::ParseReservationView, [&](const api::ReservationView& r) {
        std::cout << (created ? "Created" : "Replaced") << " reservation " << TerminalSafe(r.name)
                  << ": " << TerminalSafe(r.nodes) << " (" << r.gpus << " GPUs) from "
                  << FormatTime(r.start_ms) << " to " << FormatTime(r.end_ms)
                  << (r.maintenance ? ", maintenance" : "") << "\n";
      });
}

int RunReservationDelete(const SetArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("DELETE", ReservationTarget(args.name));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "Deleted reservation " << TerminalSafe(args.name)
              << "; its nodes take any job again\n";
  }
  return kExitOk;
}

// list, show NAME, delete NAME of one kind.
void AddReadAndDelete(CLI::App& parent, const std::string& kind, int* exit_code,
                      int (*list)(const SetArgs&), int (*remove)(const SetArgs&),
                      const std::string& list_example) {
  ConnectionFlags* conn = SharedConnectionFlags();
  auto la = std::make_shared<SetArgs>();
  CLI::App* l = AddVerb(parent, "list",
                        "List the " + kind +
                            "s.\n\n"
                            "Examples:\n"
                            "  topo " +
                            kind + " list\n" + list_example);
  l->add_flag("--json", la->json, std::string(kJsonHelp));
  AddConnectionFlags(*l, conn);
  l->callback([la, exit_code, list] { *exit_code = list(*la); });
  auto sa = std::make_shared<SetArgs>();
  CLI::App* s = AddVerb(parent, "show",
                        "Show one " + kind +
                            ".\n\n"
                            "Examples:\n"
                            "  topo " +
                            kind +
                            " show NAME\n"
                            "  topo " +
                            kind + " show NAME --json");
  s->add_option("NAME", sa->name, "The " + kind + "'s name")->required();
  s->add_flag("--json", sa->json, std::string(kJsonHelp));
  AddConnectionFlags(*s, conn);
  s->callback([sa, exit_code, list] { *exit_code = list(*sa); });
  auto da = std::make_shared<SetArgs>();
  CLI::App* d = AddVerb(parent, "delete",
                        "Delete a " + kind +
                            " (cluster-admin).\n\n"
                            "Refused (exit 6) while a job, waiting or running, names it: the "
                            "message names the jobs.\n\n"
                            "Examples:\n"
                            "  topo " +
                            kind + " delete NAME");
  d->add_option("NAME", da->name, "The " + kind + "'s name")->required();
  d->add_flag("--json", da->json, std::string(kJsonHelp));
  AddConnectionFlags(*d, conn);
  d->callback([da, exit_code, remove] { *exit_code = remove(*da); });
}

}  // namespace

void RegisterNodeSetCommands(CLI::App& app, int* exit_code) {
  ConnectionFlags* conn = SharedConnectionFlags();

  CLI::App* partition = AddVerb(
      app, "partition",
      "Partitions: named sets of nodes with their own limits and tenants (as Slurm's)\n\n"
      "A job runs in the partition it names (topo submit -p NAME), else in the default one;\n"
      "with no partitions every job may use every node. A node may be in several.");
  partition->require_subcommand(1);
  auto pc = std::make_shared<PartitionCreateArgs>();
  CLI::App* c =
      AddVerb(*partition, "create",
              "Create a partition, or replace the one of that name (cluster-admin).\n\n"
              "Jobs that name it run only on its nodes, within its time and GPU bounds, if their\n"
              "tenant is allowed (a tenant admits every tenant below it: org admits org/team). A\n"
              "job of a higher --priority-tier is considered first and may preempt jobs of a\n"
              "lower tier's --preemptible partition.\n\n"
              "Examples:\n"
              "  topo partition create gpu --nodes 'gb[000-255]' --max-time 2d --default-time 4h "
              "--default\n"
              "  topo partition create debug --nodes 'gb[256-263]' --max-time 30m --max-gpus 16 "
              "--priority-tier 10\n"
              "  topo partition create research --nodes 'gb[264-287]' --tenants org/research "
              "--preemptible");
  c->add_option("NAME", pc->flags.name,
                "The partition's name: 1-64 bytes of A-Z a-z 0-9 . _ -, not starting with - or .")
      ->required();
  c->add_option("--nodes", pc->flags.nodes, "Its nodes, a hostlist such as 'gb[000-255]'")
      ->type_name("HOSTLIST")
      ->required();
  c->add_option("--max-time", pc->flags.max_time,
                "The longest time limit a job may ask for (2d, 4h, 90m; default: no bound)")
      ->type_name("DURATION");
  c->add_option("--default-time", pc->flags.default_time,
                "The time limit of its jobs that ask for none (default: the scheduler's)")
      ->type_name("DURATION");
  c->add_option("--tenants", pc->flags.tenants,
                "The tenants whose jobs may run here, comma-separated, each with every tenant "
                "below it (default: every tenant)")
      ->type_name("T,T,...");
  c->add_option("--max-gpus", pc->flags.max_gpus, "The most GPUs one job may ask for")
      ->type_name("N");
  c->add_option("--priority-tier", pc->flags.priority_tier,
                "-1000..1000 (default 0): jobs of a higher tier are considered first")
      ->type_name("N");
  c->add_flag("--preemptible", pc->flags.preemptible,
              "Its jobs may be preempted (by priority, or by a higher tier)");
  c->add_flag("--default", pc->flags.is_default,
              "Jobs that name no partition run here (one partition at most)");
  c->add_flag("--json", pc->json, std::string(kJsonHelp));
  AddConnectionFlags(*c, conn);
  c->callback([pc, exit_code] { *exit_code = RunPartitionCreate(*pc); });
  AddReadAndDelete(*partition, "partition", exit_code, RunPartitionList, RunPartitionDelete,
                   "  topo partition list --json | jq '.partitions[] | {name, free_gpus}'\n\n"
                   "NODES is the hostlist, UP the up nodes of all, FREE the free GPUs; the\n"
                   "default partition is marked *.");

  CLI::App* reservation = AddVerb(
      app, "reservation",
      "Reservations: nodes held for a time window, for some tenants or for maintenance\n\n"
      "While a reservation is active only jobs naming it (topo submit --reservation NAME)\n"
      "take work on its nodes; before it, other jobs use them only if their time limit ends\n"
      "by its start.");
  reservation->require_subcommand(1);
  auto rc = std::make_shared<ReservationCreateArgs>();
  CLI::App* rcc = AddVerb(
      *reservation, "create",
      "Create a reservation, or replace the one of that name (cluster-admin).\n\n"
      "Give the nodes (--nodes) or a GPU count (--gpus: the scheduler picks whole up nodes\n"
      "in the fewest, most compact domains, of --partition when given). --start takes now,\n"
      "now+2h, an ISO-8601 time (2026-11-01T14:30 local, 2026-11-01T14:30Z UTC) or Unix\n"
      "milliseconds. A maintenance reservation drains its nodes in time: running jobs that\n"
      "would overrun its start checkpoint and are requeued at it, to restart elsewhere.\n\n"
      "Examples:\n"
      "  topo reservation create maint --nodes 'gb[000-017]' --start 2026-12-01T06:00 "
      "--duration 4h --maintenance\n"
      "  topo reservation create demo --gpus 64 --start now+1h --duration 2h --tenants "
      "org/demo\n"
      "  topo reservation create eval --gpus 32 --partition gpu --start now --end now+8h");
  rcc->add_option("NAME", rc->flags.name,
                  "The reservation's name: 1-64 bytes of A-Z a-z 0-9 . _ -, not starting with - "
                  "or .")
      ->required();
  CLI::Option* nodes = rcc->add_option("--nodes", rc->flags.nodes,
                                       "The nodes to hold, a hostlist such as "
                                       "'gb[000-017]'")
                           ->type_name("HOSTLIST");
  rcc->add_option("--gpus", rc->flags.gpus,
                  "Hold whole nodes for this many GPUs, chosen by the scheduler")
      ->type_name("N")
      ->excludes(nodes);
  rcc->add_option("--start", rc->flags.start, "When it starts (default: now)")->type_name("TIME");
  CLI::Option* duration =
      rcc->add_option("--duration", rc->flags.duration, "How long it lasts (4h, 90m, 1d)")
          ->type_name("DURATION");
  rcc->add_option("--end", rc->flags.end, "When it ends, instead of --duration")
      ->type_name("TIME")
      ->excludes(duration);
  rcc->add_option("--tenants", rc->flags.tenants,
                  "The tenants whose jobs may use it, comma-separated (default: any job naming "
                  "it)")
      ->type_name("T,T,...");
  rcc->add_flag("--maintenance", rc->flags.maintenance,
                "Drain its nodes for it: running jobs checkpoint and move before it starts");
  rcc->add_option("--partition", rc->flags.partition,
                  "With --gpus: choose the nodes in this partition")
      ->type_name("NAME");
  rcc->add_flag("--json", rc->json, std::string(kJsonHelp));
  AddConnectionFlags(*rcc, conn);
  rcc->callback([rc, exit_code] { *exit_code = RunReservationCreate(*rc); });
  AddReadAndDelete(*reservation, "reservation", exit_code, RunReservationList, RunReservationDelete,
                   "  topo reservation list --json | jq '.reservations[] | {name, state}'\n\n"
                   "STATE is planned before the start and active inside the window; a\n"
                   "reservation that ended is gone.");
}

}  // namespace topo::cli
