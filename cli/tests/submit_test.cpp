#include "client/submit.hpp"

#include <doctest/doctest.h>

#include "topo/common/job_io.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/perf_model.hpp"

#include <string>

namespace topo::cli {
namespace {

using nlohmann::json;

// What every rank runs, for the requests built here.
const std::vector<std::string> kCommand = {"python3", "train.py"};

int64_t Seconds(std::string_view text) {
  core::Result<int64_t> r = ParseDuration(text);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return r.value();
}

std::string DurationError(std::string_view text) {
  core::Result<int64_t> r = ParseDuration(text);
  REQUIRE_FALSE(r.ok());
  return r.message();
}

TEST_CASE("ParseDuration: units, compounds and H:MM:SS") {
  CHECK(Seconds("2h") == 7200);
  CHECK(Seconds("90m") == 5400);
  CHECK(Seconds("3600s") == 3600);
  CHECK(Seconds("1d") == 86400);
  CHECK(Seconds("1h30m") == 5400);
  CHECK(Seconds("1d12h") == 129600);
  CHECK(Seconds("2H") == 7200);
  CHECK(Seconds(" 45s ") == 45);
  CHECK(Seconds("02:00:00") == 7200);
  CHECK(Seconds("1:30:15") == 5415);
  CHECK(Seconds("100:00:00") == 360000);
  CHECK(Seconds("1-12:00:00") == 129600);
}

TEST_CASE("--model takes the step-time model's presets and lists them otherwise") {
  for (const std::string& name : core::ModelPresetNames()) {
    CHECK_MESSAGE(CheckSubmitFlag("model", name).ok(), name);
  }
  core::Status s = CheckSubmitFlag("model", "llama-9000");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("--model: 'llama-9000' is not a model preset") != std::string::npos);
  CHECK(s.message().find("llama3-70b") != std::string::npos);
}

TEST_CASE("ParseMemoryMiB: units, bounds and refusals") {
  auto mib = [](std::string_view t) {
    core::Result<int64_t> r = ParseMemoryMiB(t);
    REQUIRE_MESSAGE(r.ok(), r.message());
    return r.value();
  };
  CHECK(mib("512") == 512);
  CHECK(mib("512M") == 512);
  CHECK(mib("64G") == 65536);
  CHECK(mib("64GiB") == 65536);
  CHECK(mib("1T") == 1048576);
  CHECK(mib("1024T") == int64_t{1} << 30);
  for (std::string_view bad :
       {"", "lots", "0", "-1G", "64X", "1025T", "9999999999999999999G", "64 G"}) {
    core::Result<int64_t> r = ParseMemoryMiB(bad);
    CHECK_MESSAGE(!r.ok(), bad);
    if (!r.ok()) CHECK(r.message().find("512M, 64G or 1T") != std::string::npos);
  }
}

TEST_CASE("ParseDuration: errors say what is wrong and show the forms") {
  CHECK(DurationError("60").find("add a unit: 60s, 60m, 60h or 60d") != std::string::npos);
  CHECK(DurationError("2x").find("unknown unit 'x'") != std::string::npos);
  CHECK(DurationError("").find("empty") != std::string::npos);
  CHECK(DurationError("0s").find("longer than 0") != std::string::npos);
  CHECK(DurationError("1:30").find("H:MM:SS") != std::string::npos);
  CHECK(DurationError("1:60:00").find("00..59") != std::string::npos);
  CHECK(DurationError("1:5:00").find("two digits") != std::string::npos);
  CHECK(DurationError("1h1h").find("given twice") != std::string::npos);
  CHECK(DurationError("h").find("expected a number") != std::string::npos);
  CHECK(DurationError("-5m").find("expected a number") != std::string::npos);
  CHECK(DurationError("99999999999d").find("too") != std::string::npos);
  CHECK(DurationError("2 h").find("e.g. 90m, 2h") != std::string::npos);
}

TEST_CASE("SplitWords: quotes, escapes and comments like a shell") {
  auto words = [](std::string_view t) {
    auto r = SplitWords(t);
    REQUIRE_MESSAGE(r.ok(), r.message());
    return r.value();
  };
  using W = std::vector<std::string>;
  CHECK(words("  --gpus 64   --tp 8 ") == W{"--gpus", "64", "--tp", "8"});
  CHECK(words("--name 'my job'") == W{"--name", "my job"});
  CHECK(words("--name \"a \\\"b\\\" c\"") == W{"--name", "a \"b\" c"});
  CHECK(words("--name a\\ b") == W{"--name", "a b"});
  CHECK(words("--name x'y z'") == W{"--name", "xy z"});
  CHECK(words("--gpus 8 # eight GPUs") == W{"--gpus", "8"});
  CHECK(words("--name a#b") == W{"--name", "a#b"});
  CHECK(words("--name ''") == W{"--name", ""});
  CHECK_FALSE(SplitWords("--name 'open").ok());
  CHECK_FALSE(SplitWords("--name \"open").ok());
  CHECK_FALSE(SplitWords("--name x\\").ok());
}

TEST_CASE("ParseScriptDirectives: the leading comment block only, like sbatch") {
  const std::string script =
      "#!/bin/bash\n"
      "# Train the 8B model.\n"
      "#TOPO --gpus 64 --tp 8\n"
      "\n"
      "#TOPO --pp=2 --time 2h   # two hours\n"
      "#TOPO --name 'llama 8b' --constraint pp=required:leaf\n"
      "#TOPOLOGY is an ordinary comment\n"
      "# TOPO with a space too\n"
      "srun python train.py\n"
      "#TOPO --gpus 9999\n";
  auto r = ParseScriptDirectives(script, "train.sh");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const SubmitFlags& f = r.value().flags;
  CHECK(f.at("gpus").value == "64");
  CHECK(f.at("gpus").origin == "train.sh:3");
  CHECK(f.at("tp").value == "8");
  CHECK(f.at("pp").value == "2");
  CHECK(f.at("pp").origin == "train.sh:5");
  CHECK(f.at("time").value == "2h");
  CHECK(f.at("name").value == "llama 8b");
  CHECK(f.at("constraint:pp").value == "required:leaf");
  CHECK(f.size() == 6);
  REQUIRE(r.value().warnings.size() == 1);
  CHECK(r.value().warnings[0] == "train.sh:10: #TOPO after the first command is ignored");
}

TEST_CASE("ParseScriptDirectives: CRLF, no shebang, indentation, an empty script") {
  auto r = ParseScriptDirectives("#TOPO --gpus 8\r\n  #TOPO --tp 8\r\necho hi\r\n", "w.sh");
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().flags.at("gpus").value == "8");
  CHECK(r.value().flags.at("tp").value == "8");
  auto empty = ParseScriptDirectives("", "e.sh");
  REQUIRE(empty.ok());
  CHECK(empty.value().flags.empty());
  // A shebang is only skipped on the first line; "#!" later is a comment.
  auto late = ParseScriptDirectives("# x\n#!/bin/sh\n#TOPO --gpus 4\n", "l.sh");
  REQUIRE(late.ok());
  CHECK(late.value().flags.at("gpus").value == "4");
}

TEST_CASE("ParseScriptDirectives: bad lines name the file and line") {
  auto err = [](std::string_view script) {
    auto r = ParseScriptDirectives(script, "job.sh");
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  CHECK(err("#!/bin/sh\n#TOPO --gpus 8\n#TOPO --gpus abc\n") ==
        "job.sh:3: --gpus: 'abc' is not a whole number");
  CHECK(err("#TOPO --gpu 8\n").find("job.sh:1: unknown option --gpu") == 0);
  CHECK(err("#TOPO --tp\n") == "job.sh:1: --tp needs a value");
  CHECK(err("#TOPO gpus 8\n") == "job.sh:1: expected an option like --gpus 64, got 'gpus'");
  CHECK(err("\n\n#TOPO --name 'x\n") == "job.sh:3: unbalanced '");
  CHECK(err("#TOPO --time 60\n").find("job.sh:1: --time: duration '60': add a unit") == 0);
  CHECK(err("#TOPO --constraint xx=none\n").find("job.sh:1: --constraint:") == 0);
  CHECK(err("#TOPO --constraint pp=maybe:leaf\n").find("required:TIER or preferred:TIER") !=
        std::string::npos);
  CHECK(err("#TOPO --spares -1\n") == "job.sh:1: --spares: must be >= 0, got -1");
}

TEST_CASE("Submit flags: the command line overrides #TOPO lines, which override the spec") {
  auto script = ParseScriptDirectives(
      "#TOPO --gpus 64 --tp 8 --time 2h --name from-script\n#TOPO --checkpoint-interval never\n"
      "#TOPO --placement-wait 45m\n",
      "s.sh");
  REQUIRE(script.ok());
  SubmitFlags cmd;
  REQUIRE(AddSubmitFlag(&cmd, "time", "90m", "").ok());
  REQUIRE(AddSubmitFlag(&cmd, "pp", "2", "").ok());
  REQUIRE(AddSubmitFlag(&cmd, "priority", "-5", "").ok());
  REQUIRE(AddSubmitFlag(&cmd, "constraint", "dp=preferred:pod", "").ok());
  const SubmitFlags merged = MergeSubmitFlags(script.value().flags, cmd);
  CHECK(merged.at("time").value == "90m");
  CHECK(merged.at("time").origin.empty());
  CHECK(merged.at("gpus").origin == "s.sh:1");

  const json spec = {
      {"gpus", 128}, {"name", "from-spec"}, {"spares", 1}, {"parallelism", {{"ep", 4}}}};
  auto req = BuildSubmitRequest(merged, spec, "s.sh", kCommand);
  REQUIRE_MESSAGE(req.ok(), req.message());
  const api::SubmitRequest& r = req.value();
  CHECK(r.spec.gpus == 64);
  CHECK(r.spec.name == "from-script");
  CHECK(r.spec.spares == 1);
  CHECK(r.spec.parallelism.ep == 4);
  CHECK(r.spec.parallelism.tp == 8);
  CHECK(r.spec.parallelism.pp == 2);
  CHECK(r.spec.parallelism.dp == 4);  // derived: 64 / (8 x 2)
  CHECK(r.spec.constraint(core::GroupKind::kDp).strength == core::Strength::kPreferred);
  CHECK(r.spec.constraint(core::GroupKind::kDp).tier == "pod");
  CHECK(r.time_limit_s == 5400);
  CHECK(r.checkpoint_interval_s == -1);
  CHECK(r.placement_wait_s == 2700);
  CHECK(r.priority == -5);
  CHECK_FALSE(r.tenant);
  CHECK(r.command == kCommand);
}

TEST_CASE("BuildSubmitRequest: names, whole requests and the daemon's own checks") {
  SubmitFlags f;
  REQUIRE(AddSubmitFlag(&f, "gpus", "16", "").ok());
  REQUIRE(AddSubmitFlag(&f, "tp", "8", "").ok());
  REQUIRE(AddSubmitFlag(&f, "tenant", "org/team", "").ok());
  auto r = BuildSubmitRequest(f, std::nullopt, "train.sh", kCommand);
  REQUIRE_MESSAGE(r.ok(), r.message());
  api::SubmitRequest want;
  want.spec = common::JobSpecFromJson(
                  json{{"gpus", 16}, {"parallelism", {{"tp", 8}}}, {"name", "train.sh"}})
                  .value();
  want.tenant = "org/team";
  want.command = kCommand;
  CHECK(r.value() == want);
  // What is sent: the API's writer, read back as the daemon reads it.
  auto sent = api::ParseSubmitRequest(api::WriteSubmitRequest(r.value()));
  REQUIRE(sent.ok());
  CHECK(sent.value() == want);

  // A whole request as --spec: its fields stay unless a flag overrides,
  // its command too unless the command line gives one.
  const json whole = {
      {"spec", {{"gpus", 8}}}, {"priority", 3}, {"tenant", "a"}, {"command", {"own", "cmd"}}};
  auto w = BuildSubmitRequest(f, whole, "", {});
  REQUIRE_MESSAGE(w.ok(), w.message());
  CHECK(w.value().priority == 3);
  CHECK(w.value().tenant == "org/team");
  CHECK(w.value().spec.gpus == 16);
  CHECK(w.value().spec.name.empty());
  CHECK(w.value().command == std::vector<std::string>{"own", "cmd"});
  CHECK(BuildSubmitRequest(f, whole, "", kCommand).value().command == kCommand);
  // Its fields are read as the daemon reads them, naming the file.
  auto wrong =
      BuildSubmitRequest(f, json{{"spec", {{"gpus", 8}}}, {"priority", "high"}}, "", kCommand);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.message().rfind("--spec: priority: must be an integer", 0) == 0);

  auto none = BuildSubmitRequest({}, std::nullopt, "", kCommand);
  REQUIRE_FALSE(none.ok());
  CHECK(none.message().find("--gpus N") != std::string::npos);

  SubmitFlags bad;
  REQUIRE(AddSubmitFlag(&bad, "gpus", "12", "").ok());
  REQUIRE(AddSubmitFlag(&bad, "tp", "8", "").ok());
  auto b = BuildSubmitRequest(bad, std::nullopt, "", kCommand);
  REQUIRE_FALSE(b.ok());
  CHECK(b.message().rfind("job spec: ", 0) == 0);

  auto not_object = BuildSubmitRequest(f, json::array(), "", kCommand);
  CHECK_FALSE(not_object.ok());
}

TEST_CASE("SubmitFlagTable: every flag checks its values") {
  for (const SubmitFlagInfo& info : SubmitFlagTable()) {
    CAPTURE(info.name);
    CHECK_FALSE(info.help.empty());
  }
  CHECK(CheckSubmitFlag("priority", "-100").ok());
  CHECK_FALSE(CheckSubmitFlag("gpus", "8.5").ok());
  CHECK_FALSE(CheckSubmitFlag("gpus", "99999999999").ok());
  CHECK(CheckSubmitFlag("checkpoint-interval", "never").ok());
  CHECK(CheckSubmitFlag("checkpoint-interval", "30m").ok());
  CHECK_FALSE(CheckSubmitFlag("checkpoint-interval", "sometimes").ok());
  CHECK(CheckSubmitFlag("placement-wait", "never").ok());
  CHECK(CheckSubmitFlag("placement-wait", "45m").ok());
  CHECK(CheckSubmitFlag("placement-wait", "soon").message().find("--placement-wait") == 0);
  CHECK(CheckSubmitFlag("constraint", "tp=none").ok());
  CHECK(CheckSubmitFlag("constraint", "ep=required:hbd").ok());
  CHECK_FALSE(CheckSubmitFlag("constraint", "ep=required:").ok());
  CHECK_FALSE(CheckSubmitFlag("tenant", "").ok());
  // Node selection.
  CHECK(CheckSubmitFlag("gpu-type", "H100,H200").ok());
  CHECK(CheckSubmitFlag("gpu-type", "H100,").message() ==
        "--gpu-type: 'H100,': an empty name in the list");
  CHECK_FALSE(CheckSubmitFlag("feature", "ib nvme").ok());
  CHECK_FALSE(CheckSubmitFlag("feature", std::string(65, 'f')).ok());
  CHECK(CheckSubmitFlag("nodelist", "gpu[001-004]").ok());
  CHECK(CheckSubmitFlag("nodelist", "gpu[001-").message().find("--nodelist: ") == 0);
  CHECK(CheckSubmitFlag("exclude", "n\x1b").message().find("--exclude: ") == 0);
  CHECK_FALSE(CheckSubmitFlag("exclude", "n[1-200000]").ok());
}

TEST_CASE("--gpu-type, --feature, --nodelist and --exclude reach the job spec") {
  SubmitFlags f;
  REQUIRE(AddSubmitFlag(&f, "gpus", "16", "").ok());
  REQUIRE(AddSubmitFlag(&f, "gpu-type", "H100,h200", "").ok());
  REQUIRE(AddSubmitFlag(&f, "feature", "ib,nvme", "").ok());
  REQUIRE(AddSubmitFlag(&f, "nodelist", "gpu[001-002]", "").ok());
  REQUIRE(AddSubmitFlag(&f, "exclude", "gpu009", "").ok());
  auto req = BuildSubmitRequest(f, std::nullopt, "job", kCommand);
  REQUIRE_MESSAGE(req.ok(), req.message());
  const core::NodeSelection& sel = req.value().spec.selection;
  CHECK(sel.gpu_types == std::vector<std::string>{"H100", "h200"});
  CHECK(sel.features == std::vector<std::string>{"ib", "nvme"});
  CHECK(sel.nodelist == std::vector<std::string>{"gpu001", "gpu002"});
  CHECK(sel.exclude == std::vector<std::string>{"gpu009"});
  // A node in both lists: the daemon's own check, named by the flags.
  REQUIRE(AddSubmitFlag(&f, "exclude", "gpu002", "").ok());
  auto both = BuildSubmitRequest(f, std::nullopt, "job", kCommand);
  REQUIRE_FALSE(both.ok());
  CHECK(both.message().find("node 'gpu002' is in both nodelist and exclude") != std::string::npos);
}

TEST_CASE("launch mode, variables, --export, chdir and output files, from flags and #TOPO") {
  auto script = ParseScriptDirectives(
      "#!/bin/sh\n"
      "#TOPO --gpus 16 --launch node --env NCCL_DEBUG=WARN --env LANG=C\n"
      "#TOPO --chdir /srv/run --output out-%j-%r.log --export HF_HOME,WANDB_MODE\n",
      "t.sh");
  REQUIRE_MESSAGE(script.ok(), script.message());
  SubmitFlags cmd;
  REQUIRE(AddSubmitFlag(&cmd, "env", "NCCL_DEBUG=INFO", "").ok());  // wins over #TOPO
  REQUIRE(AddSubmitFlag(&cmd, "error", "/srv/err-%j.log", "").ok());
  const std::map<std::string, std::string> environment = {
      {"HF_HOME", "/data/hf"}, {"WANDB_MODE", "offline"}, {"SECRET", "no"}, {"TOPO_TOKEN", "t"}};
  auto r = BuildSubmitRequest(MergeSubmitFlags(script.value().flags, cmd), std::nullopt, "t.sh",
                              kCommand, environment);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().launch == core::LaunchMode::kNode);
  CHECK(r.value().chdir == "/srv/run");
  CHECK(r.value().output == "out-%j-%r.log");
  CHECK(r.value().error == "/srv/err-%j.log");
  CHECK(*r.value().env == std::map<std::string, std::string>{{"HF_HOME", "/data/hf"},
                                                             {"WANDB_MODE", "offline"},
                                                             {"NCCL_DEBUG", "INFO"},
                                                             {"LANG", "C"}});

  // NONE is the default: nothing of the submitter's environment travels.
  SubmitFlags plain;
  REQUIRE(AddSubmitFlag(&plain, "gpus", "8", "").ok());
  auto p = BuildSubmitRequest(plain, std::nullopt, "", kCommand, environment);
  REQUIRE(p.ok());
  CHECK_FALSE(p.value().env);
  CHECK_FALSE(p.value().launch);
  // ALL: everything the job may set; the agent's own names are left out, saying so.
  REQUIRE(AddSubmitFlag(&plain, "export", "ALL", "").ok());
  std::vector<std::string> warnings;
  auto all = BuildSubmitRequest(plain, std::nullopt, "", kCommand, environment, &warnings);
  REQUIRE(all.ok());
  CHECK(*all.value().env == std::map<std::string, std::string>{{"HF_HOME", "/data/hf"},
                                                               {"SECRET", "no"},
                                                               {"WANDB_MODE", "offline"}});
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("TOPO_TOKEN") != std::string::npos);
  // A listed name that is not set is an error, naming it.
  REQUIRE(AddSubmitFlag(&plain, "export", "HF_HOME,NOPE", "").ok());
  auto missing = BuildSubmitRequest(plain, std::nullopt, "", kCommand, environment);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("--export: NOPE is not set") != std::string::npos);

  // Refused at the flag, naming it.
  struct Bad {
    const char* flag;
    const char* value;
    const char* says;
  };
  const Bad bads[] = {
      {"launch", "gpu", "rank or node"}, {"env", "NOVALUE", "NAME=VALUE"},
      {"env", "RANK=3", "reserved"},     {"env", "1X=3", "not a variable name"},
      {"export", "A=1", "--env A=1"},    {"export", "ALL,HOME", "stand alone"},
      {"export", "", "ALL, NONE"},       {"chdir", "run", "absolute"},
      {"output", "o-%x", "%j (job id)"}, {"error", "logs/", "directory"},
  };
  for (const Bad& b : bads) {
    CAPTURE(b.flag);
    CAPTURE(b.value);
    const core::Status st = CheckSubmitFlag(b.flag, b.value);
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find(std::string("--") + b.flag) == 0);
    CHECK(st.message().find(b.says) != std::string::npos);
  }
  auto at = ParseScriptDirectives("#TOPO --env TOPO_JOB_ID=1\n", "bad.sh");
  REQUIRE_FALSE(at.ok());
  CHECK(at.message().find("bad.sh:1: --env") == 0);
  // A --spec file's env is checked as the daemon checks it.
  SubmitFlags g;
  REQUIRE(AddSubmitFlag(&g, "gpus", "8", "").ok());
  auto spec_env =
      BuildSubmitRequest(g, json{{"spec", {{"gpus", 8}}}, {"env", {{"RANK", "1"}}}}, "", kCommand);
  REQUIRE_FALSE(spec_env.ok());
  CHECK(spec_env.message().find("reserved") != std::string::npos);
}

TEST_CASE("ScriptCommand: the script through its #! interpreter, as one argument") {
  CHECK(ScriptCommand("echo hi\n") == std::vector<std::string>{"/bin/sh", "-c", "echo hi\n"});
  CHECK(ScriptCommand("#!/usr/bin/env python3 -u\nprint(1)\n") ==
        std::vector<std::string>{"/usr/bin/env", "python3", "-u", "-c",
                                 "#!/usr/bin/env python3 -u\nprint(1)\n"});
  CHECK(ScriptCommand("#!") == std::vector<std::string>{"/bin/sh", "-c", "#!"});
  CHECK(kMaxScriptBytes == proto::kMaxArgBytes);
}

TEST_CASE("CheckCommand: what exec accepts, with the argument named in the user's terms") {
  const ArgumentOrigin origin = [](size_t i) {
    return "job.json: command[" + std::to_string(i) + "]";
  };
  CHECK(CheckCommand(json{"python", "train.py"}, origin).ok());
  CHECK(CheckCommand(json{"x", std::string(proto::kMaxArgBytes, 'a')}, origin).ok());

  core::Status s = CheckCommand(json{"x", "y", std::string(proto::kMaxArgBytes + 1, 'a')}, origin);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() ==
        "job.json: command[2] is 128 KiB (131072 bytes); Linux runs no argument longer than "
        "131071 bytes (MAX_ARG_STRLEN; exec fails with E2BIG): put the bulk in a file the job "
        "reads");

  // Five arguments that fit alone but not together.
  json many = json::array({"x"});
  for (int i = 0; i < 5; ++i) many.push_back(std::string(proto::kMaxArgBytes - 1000, 'b'));
  s = CheckCommand(many, origin);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("the command's 6 arguments take 635.1 KiB with their NULs; at most "
                         "512 KiB") == 0);
  CHECK(s.message().find("(the largest is job.json: command[1], 127.0 KiB)") != std::string::npos);

  s = CheckCommand(json::array({"x", std::string("a\0b", 3)}), origin);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "job.json: command[1] holds a NUL byte, which no argument can");
  s = CheckCommand(json::array({"x", 3}), origin);
  CHECK(s.message() == "job.json: command[1] must be a string");
  CHECK_FALSE(CheckCommand(json::array(), origin).ok());
  CHECK_FALSE(CheckCommand(json::array({""}), origin).ok());
  CHECK_FALSE(CheckCommand(json("sh -c x"), origin).ok());
  json too_many = json::array();
  for (size_t i = 0; i <= proto::kMaxCommandArgs; ++i) too_many.push_back("a");
  s = CheckCommand(too_many, origin);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("8193 arguments; at most 8192") != std::string::npos);
}

TEST_CASE("#SBATCH lines: the common directives become flags, #TOPO wins, the rest are listed") {
  auto d = ParseScriptDirectives(
      "#!/bin/bash\n"
      "#SBATCH -N 4\n"
      "#SBATCH --gpus-per-node=h100:8\n"
      "#SBATCH -t 1-02:30:00 -J pretrain\n"
      "#SBATCH --output=out-%j.log --chdir /home/ada/run\n"
      "#SBATCH -p gpu --qos=high --dependency afterok:12 --array=0-3%2\n"
      "#SBATCH --account org/team --mem=64G --exclusive\n"
      "#TOPO --tp 8 --name from-topo\n"
      "srun python train.py\n",
      "job.sh");
  REQUIRE_MESSAGE(d.ok(), d.message());
  const SubmitFlags& f = d.value().flags;
  CHECK(f.at("gpus").value == "32");
  CHECK(f.at("gpus-per-node").value == "8");
  CHECK(f.at("time").value == std::to_string(86400 + 2 * 3600 + 30 * 60) + "s");
  CHECK(f.at("name").value == "from-topo");  // #TOPO wins
  CHECK(f.at("name").origin == "job.sh:8");
  CHECK(f.at("output").value == "out-%j.log");
  CHECK(f.at("chdir").value == "/home/ada/run");
  CHECK(f.at("dependency").value == "afterok:12");
  CHECK(f.at("array").value == "0-3%2");
  CHECK(f.at("tenant").value == "org/team");
  CHECK(f.at("mem-per-node").value == "64G");
  CHECK(f.at("tp").value == "8");
  CHECK(f.at("time").origin.find("job.sh:4 (#SBATCH -t 1-02:30:00)") == 0);
  CHECK(f.at("partition").value == "gpu");  // -p is the partition now
  CHECK(f.at("partition").origin == "job.sh:6 (#SBATCH -p gpu)");
  REQUIRE(d.value().warnings.size() == 1);
  const std::string& w = d.value().warnings[0];
  CHECK(w.find("-p gpu") == std::string::npos);
  CHECK(w.find("--qos=high (job.sh:6)") != std::string::npos);
  CHECK(w.find("--exclusive") != std::string::npos);  // with --gpus-per-node: not honoured
  auto req = BuildSubmitRequest(f, std::nullopt, "job.sh", kCommand);
  REQUIRE_MESSAGE(req.ok(), req.message());
  CHECK(req.value().spec.gpus == 32);
  CHECK(req.value().dependency == "afterok:12");
  CHECK(req.value().array == "0-3%2");

  // Slurm's time forms, ntasks-per-node as GPUs per node, --gres.
  auto t = ParseScriptDirectives("#SBATCH --nodes=2 --ntasks-per-node=4 -t 90\n", "a.sh");
  REQUIRE(t.ok());
  CHECK(t.value().flags.at("gpus").value == "8");
  CHECK(t.value().flags.at("time").value == "5400s");
  auto g = ParseScriptDirectives("#SBATCH -N2 --gres=gpu:a100:4 --time=10:00\n", "g.sh");
  REQUIRE(g.ok());
  CHECK(g.value().flags.at("gpus").value == "8");
  CHECK(g.value().flags.at("time").value == "600s");
  // The GPU type of --gres, --gpus-per-node and -G; -C, -w and -x.
  CHECK(g.value().flags.at("gpu-type").value == "a100");
  auto sel = ParseScriptDirectives(
      "#SBATCH -N 2 --gpus-per-node=h100:8\n#SBATCH -C ib&nvme -w gpu[01-02] -x gpu07\n", "s.sh");
  REQUIRE_MESSAGE(sel.ok(), sel.message());
  CHECK(sel.value().flags.at("gpu-type").value == "h100");
  CHECK(sel.value().flags.at("feature").value == "ib,nvme");
  CHECK(sel.value().flags.at("nodelist").value == "gpu[01-02]");
  CHECK(sel.value().flags.at("exclude").value == "gpu07");
  CHECK(sel.value().warnings.empty());
  auto typed_g = ParseScriptDirectives("#SBATCH -G gb200:72\n", "t.sh");
  REQUIRE(typed_g.ok());
  CHECK(typed_g.value().flags.at("gpu-type").value == "gb200");
  CHECK(typed_g.value().flags.at("gpus").value == "72");
  auto untyped = ParseScriptDirectives("#SBATCH -N2 --gres=gpu:8\n", "u.sh");
  REQUIRE(untyped.ok());
  CHECK(untyped.value().flags.count("gpu-type") == 0);
  // A -C richer than an AND is refused, naming the line.
  for (const char* rich :
       {"#SBATCH -C ib|nvme\n", "#SBATCH --constraint=[rack1|rack2]\n", "#SBATCH -C ib*2\n"}) {
    CAPTURE(rich);
    auto r = ParseScriptDirectives(rich, "c.sh");
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().rfind("c.sh:1", 0) == 0);
    CHECK(r.message().find("features joined by &") != std::string::npos);
  }
  // -G gives the GPUs; a later -n (ranks) does not override it.
  auto gn = ParseScriptDirectives("#SBATCH -G 16 -n 8\n", "gn.sh");
  REQUIRE(gn.ok());
  CHECK(gn.value().flags.at("gpus").value == "16");
  // Nodes without GPUs per node: listed, not guessed.
  auto n = ParseScriptDirectives("#SBATCH -N 3\n", "n.sh");
  REQUIRE(n.ok());
  CHECK(n.value().flags.count("gpus") == 0);
  REQUIRE(n.value().warnings.size() == 1);
  CHECK(n.value().warnings[0].find("--gpus-per-node") != std::string::npos);
  // Errors name the line and the directive.
  for (const char* bad : {"#SBATCH -t soon\n", "#SBATCH --nodes=x\n", "#SBATCH --array=9-1\n",
                          "#SBATCH --dependency=after:1\n", "#SBATCH --time\n", "#SBATCH nodes=2\n",
                          "#SBATCH --nodes=h100:2\n"}) {
    auto r = ParseScriptDirectives(bad, "b.sh");
    CAPTURE(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().rfind("b.sh:1", 0) == 0);
  }
  // After the first command: ignored with a warning, as #TOPO is.
  auto late = ParseScriptDirectives("echo hi\n#SBATCH -N 2\n", "l.sh");
  REQUIRE(late.ok());
  CHECK(late.value().warnings.at(0).find("#SBATCH after the first command") != std::string::npos);
}

TEST_CASE("--partition, --reservation and #SBATCH -p, --partition, --reservation") {
  SubmitFlags f;
  REQUIRE(AddSubmitFlag(&f, "gpus", "8", "").ok());
  REQUIRE(AddSubmitFlag(&f, "partition", "debug", "").ok());
  REQUIRE(AddSubmitFlag(&f, "reservation", "maint_2026-12.a", "").ok());
  auto req = BuildSubmitRequest(f, std::nullopt, "", kCommand);
  REQUIRE_MESSAGE(req.ok(), req.message());
  CHECK(req.value().partition == "debug");
  CHECK(req.value().reservation == "maint_2026-12.a");
  const json body = json::parse(api::WriteSubmitRequest(req.value()));
  CHECK(body["partition"] == "debug");
  CHECK(body["reservation"] == "maint_2026-12.a");
  // Without the flags the request names neither: the default partition.
  SubmitFlags plain;
  REQUIRE(AddSubmitFlag(&plain, "gpus", "8", "").ok());
  const json none = json::parse(
      api::WriteSubmitRequest(BuildSubmitRequest(plain, std::nullopt, "", kCommand).value()));
  CHECK_FALSE(none.contains("partition"));
  CHECK_FALSE(none.contains("reservation"));

  // Names the daemon would refuse are refused here, naming the flag and the rule.
  struct Bad {
    const char* flag;
    std::string value;
    const char* says;
  };
  for (const Bad& b : {Bad{"partition", "-gpu", "--partition: '-gpu' is not a partition name"},
                       Bad{"partition", ".hidden", "not starting with - or ."},
                       Bad{"partition", "gpu,debug", "a job runs in one partition"},
                       Bad{"partition", std::string(65, 'p'), "1-64 bytes"},
                       Bad{"partition", "", "is not a partition name"},
                       Bad{"reservation", "a b", "--reservation: 'a b' is not a reservation name"},
                       Bad{"reservation", "x\x1b[2J", "x\\x1b[2J"}}) {
    CAPTURE(b.value);
    SubmitFlags g;
    core::Status st = AddSubmitFlag(&g, b.flag, b.value, "s.sh:2");
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().rfind("s.sh:2: --", 0) == 0);
    CHECK(st.message().find(b.says) != std::string::npos);
  }

  // #SBATCH -p NAME, -pNAME, --partition=NAME and --reservation NAME; #TOPO wins.
  auto d = ParseScriptDirectives(
      "#!/bin/sh\n#SBATCH -N 1 --gpus-per-node=8 -pdebug\n#SBATCH --reservation maint\n", "r.sh");
  REQUIRE_MESSAGE(d.ok(), d.message());
  CHECK(d.value().flags.at("partition").value == "debug");
  CHECK(d.value().flags.at("reservation").value == "maint");
  CHECK(d.value().flags.at("reservation").origin == "r.sh:3 (#SBATCH --reservation maint)");
  CHECK(d.value().warnings.empty());
  auto over = ParseScriptDirectives("#SBATCH --partition=gpu\n#TOPO --partition debug\n", "o.sh");
  REQUIRE(over.ok());
  CHECK(over.value().flags.at("partition").value == "debug");
  // A Slurm list of partitions is refused: a toposched job runs in one.
  auto list = ParseScriptDirectives("#SBATCH -p gpu,debug\n", "l.sh");
  REQUIRE_FALSE(list.ok());
  CHECK(list.message().rfind("l.sh:1 (#SBATCH -p gpu,debug): --partition:", 0) == 0);
  CHECK(list.message().find("give one name") != std::string::npos);
  // A field error of the daemon names the flag that set it.
  SubmitFlags labelled;
  REQUIRE(AddSubmitFlag(&labelled, "partition", "debug", "job.sh:4").ok());
  CHECK(SubmitFieldLabel(labelled, "partition") == "--partition debug (job.sh:4)");
}

TEST_CASE("--dependency and --array: checked like the daemon, sent as given") {
  SubmitFlags f;
  REQUIRE(AddSubmitFlag(&f, "gpus", "8", "").ok());
  REQUIRE(AddSubmitFlag(&f, "dependency", "afterok:3:4,afterany:5", "").ok());
  REQUIRE(AddSubmitFlag(&f, "array", "1,3,5-7%2", "").ok());
  auto req = BuildSubmitRequest(f, std::nullopt, "x", kCommand);
  REQUIRE(req.ok());
  CHECK(req.value().dependency == "afterok:3:4,afterany:5");
  CHECK(req.value().array == "1,3,5-7%2");
  core::Status bad = AddSubmitFlag(&f, "dependency", "afterok", "");
  // The flag names the field once: the shared check's "dependency: " is dropped.
  CHECK(bad.message().rfind("--dependency: \"afterok\"", 0) == 0);
  CHECK(CheckSubmitFlag("env", "BAD KEY=1").message().rfind("--env: 'BAD KEY' is not", 0) == 0);
  CHECK(CheckSubmitFlag("export", "A B").message().rfind("--export: 'A B' is not", 0) == 0);
  CHECK(CheckSubmitFlag("chdir", "rel").message().rfind("--chdir: 'rel' is not", 0) == 0);
  CHECK(CheckSubmitFlag("array", "5-1").message().rfind("--array: \"5-1\" is not", 0) == 0);
  // A variable's own name stays: it says which one.
  CHECK(CheckSubmitFlag("env", "TOPO_X=1").message().rfind("--env: env.TOPO_X: ", 0) == 0);
  CHECK(AddSubmitFlag(&f, "array", "0-5000", "job.sh:2").message().rfind("job.sh:2: --array", 0) ==
        0);
}

TEST_CASE("errors speak of the flag typed: bounds checked before sending, fields mapped back") {
  // The bounds are the API's reader's (common/user_api.hpp), checked when
  // the request is built, before anything is sent; the error starts with
  // the flag, its value and where it was given.
  SubmitFlags f;
  REQUIRE(AddSubmitFlag(&f, "gpus", "64", "job.sh:3").ok());
  auto refused = [&](const char* flag, const char* value, const std::string& origin) {
    SubmitFlags g = f;
    REQUIRE(AddSubmitFlag(&g, flag, value, origin).ok());
    auto r = BuildSubmitRequest(g, std::nullopt, "", kCommand);
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  CHECK(refused("time", "40d", "") ==
        "--time 40d: time_limit_s: must be an integer 1..2592000 (got 3456000)");
  CHECK(refused("checkpoint-interval", "30s", "job.sh:2") ==
        "--checkpoint-interval 30s (job.sh:2): checkpoint_interval_s: is 30, below the minimum "
        "of 60 (or -1 for never)");
  CHECK(refused("placement-wait", "8d", "")
            .rfind("--placement-wait 8d: placement_wait_s: must be an integer -1..604800", 0) == 0);
  CHECK(refused("cpus-per-node", "0", "")
            .rfind("--cpus-per-node 0: cpus_per_node: must be a number 0.001..100000", 0) == 0);
  CHECK(refused("priority", "101", "").rfind("--priority 101: priority: ", 0) == 0);
  CHECK(refused("tenant", "Org!", "").rfind("--tenant Org!: tenant: must be a tenant name", 0) ==
        0);
  CHECK(AddSubmitFlag(&f, "time", "30d", "").ok());
  REQUIRE(AddSubmitFlag(&f, "priority", "5", "").ok());
  CHECK(BuildSubmitRequest(f, std::nullopt, "", kCommand).ok());
  CHECK(SubmitFieldLabel(f, "spec.gpus") == "--gpus 64 (job.sh:3)");
  CHECK(SubmitFieldLabel(f, "priority") == "--priority 5");
  CHECK(SubmitFieldLabel(f, "time_limit_s") == "--time 30d");
  CHECK(SubmitFieldLabel(f, "placement_wait_s").empty());  // not given
  CHECK(SubmitFieldLabel(f, "no_such_field").empty());
}

}  // namespace
}  // namespace topo::cli
