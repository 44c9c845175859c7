// stagger: the operator's CLI.
//   stagger [--server HOST:PORT] ls --job J [--json]
//   stagger [--server HOST:PORT] restore --job J --step latest|N --out DIR
//                                        [--consolidate]
//   stagger [--server HOST:PORT] verify --job J --step latest|N
//   stagger [--server HOST:PORT[,...]] show --job J [--step N] [--json]
//   stagger [--server HOST:PORT[,...]] gc --job J --keep N [--grace-s S]
//   stagger [--server HOST:PORT[,...]] rm --job J (--step N ... | --all)
//                                         [--grace-s S]
//   stagger [--server HOST:PORT[,...]] jobs [--json]
//   stagger demo [--servers HOST:PORT[,...]]
#include <grpc/support/log.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/session.h"
#include "util/build_info.h"
#include "util/cli_checks.h"
#include "util/log.h"
#include "util/nearest.h"

namespace {

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// A clearer message than CLI11's for the commonest mistakes: an unknown
// command (CLI11: "A subcommand is required") and an unknown option (CLI11
// reports a missing required option first). "" when neither applies.
std::string UsageHint(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands;
  for (const CLI::App* c : app.get_subcommands({})) {
    commands.push_back(c->get_name());
  }
  std::set<std::string> with_value;  // the top level's options with values
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_type_size() != 0) {
      for (const std::string& n : o->get_lnames()) with_value.insert("--" + n);
    }
  }
  CLI::App* command = nullptr;
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      const std::string name = arg.substr(0, arg.find('='));
      flags.push_back(name);
      if (command == nullptr && with_value.count(name) &&
          arg.find('=') == std::string::npos) {
        ++i;  // its value
      }
      continue;
    }
    if (command != nullptr || arg.rfind("-", 0) == 0) continue;
    try {
      command = app.get_subcommand(arg);
    } catch (const CLI::OptionNotFound&) {
      const std::string near = stagger::util::Nearest(arg, commands);
      return "unknown command '" + arg + "'" +
             (near.empty() ? "" : "; did you mean '" + near + "'?") +
             " (commands: " + Join(commands) + ")";
    }
  }
  if (command == nullptr) return "a command is required: " + Join(commands);
  std::vector<std::string> known;
  for (const CLI::App* scope : {static_cast<const CLI::App*>(&app),
                                static_cast<const CLI::App*>(command)}) {
    for (const CLI::Option* o : scope->get_options()) {
      for (const std::string& n : o->get_lnames()) known.push_back("--" + n);
    }
  }
  known.push_back("--help");
  for (const std::string& f : flags) {
    if (std::find(known.begin(), known.end(), f) != known.end()) continue;
    const std::string near = stagger::util::Nearest(f, known);
    return "unknown option '" + f + "' for '" + command->get_name() + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?");
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace stagger::client;
  // gRPC's own log lines go to our log at debug level: each command says
  // what failed in its own words.
  gpr_set_log_function([](gpr_log_func_args* args) {
    stagger::log::Debug("grpc", args->message);
  });
  CLI::App app{"stagger: checkpoints for deep-learning training"};
  app.require_subcommand(1);
  // --server, --token, --tls-ca and --log-level go before or after the
  // command: what a command does not know falls through to here.
  app.fallthrough();
  app.set_version_flag("--version", stagger::BuildInfo("stagger"));
  app.footer(
      "Exit status: 0 done; 1 the operation failed (the message says why); "
      "2 a usage error (the command line is wrong); 130 or 143 interrupted "
      "by SIGINT or SIGTERM (restore).");
  std::string server = "127.0.0.1:7700";
  auto* server_opt =
      app.add_option(
             "--server", server,
             "stagger-server gRPC HOST:PORT[,HOST:PORT...]: every server "
             "of the job")
          ->capture_default_str();

  LsArgs ls;
  auto* ls_cmd = app.add_subcommand("ls", "list the steps of a job");
  ls_cmd->add_option("--job", ls.job, "job name")->required();
  ls_cmd->add_flag("--json", ls.json, "print JSON");

  RestoreArgs restore;
  auto* restore_cmd = app.add_subcommand(
      "restore", "write a step as one safetensors file per rank");
  restore_cmd->add_option("--job", restore.job, "job name")->required();
  restore_cmd->add_option("--step", restore.step, "latest or a step number")
      ->capture_default_str();
  restore_cmd->add_option("--out", restore.out, "output directory")->required();
  restore_cmd->add_flag("--consolidate", restore.consolidate,
                        "write one model.safetensors with every tensor at "
                        "its global shape, assembled from all ranks");
  restore_cmd->add_flag("--force", restore.force,
                        "write into a non-empty --out (same names replaced)");
  restore_cmd->add_option(
      "--only", restore.only,
      "with --consolidate: only the tensors under this prefix (repeat for "
      "more), named without it and without the state dict's metadata, so "
      "model.load_state_dict(load_file(...)) takes the file");

  VerifyArgs verify;
  auto* verify_cmd = app.add_subcommand(
      "verify",
      "read every copy of every chunk of a step and check every checksum");
  verify_cmd->add_option("--job", verify.job, "job name")->required();
  verify_cmd->add_option("--step", verify.step, "latest or a step number")
      ->capture_default_str();
  verify_cmd->add_flag("--repair", verify.repair,
                       "rewrite bad copies, and copies missing from the "
                       "count the step was saved with, from a good copy");

  ShowArgs show;
  auto* show_cmd = app.add_subcommand(
      "show",
      "per-rank report of a step: stall, durable time, bytes, codecs, "
      "QoS yield, servers");
  show_cmd->add_option("--job", show.job, "job name")->required();
  show_cmd->add_option("--step", show.step, "latest or a step number")
      ->capture_default_str();
  show_cmd->add_flag("--json", show.json, "print JSON");

  GcArgs gc;
  auto* gc_cmd = app.add_subcommand(
      "gc", "delete all but the newest complete steps and what only they use");
  gc_cmd->add_option("--job", gc.job, "job name")->required();
  gc_cmd->add_option("--keep", gc.keep, "complete steps to keep (at least 1)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           !v.empty() && v.size() < 10 && std::stoul(v) >= 1
                       ? std::string()
                       : "must be a whole number of steps, at least 1, got '" +
                             v + "'";
          },
          "N >= 1"));
  gc_cmd
      ->add_option("--grace-s", gc.grace_s,
                   "keep chunks written this recently (saves in flight)")
      ->capture_default_str();
  gc_cmd->add_flag("--keep-cold", gc.keep_cold,
                   "collect the servers' disks only, leaving the durable "
                   "tier (--rados-pool, --s3-bucket) to its --rados-keep");

  RmArgs rm;
  auto* rm_cmd = app.add_subcommand(
      "rm", "delete steps of a job, or all of them, and what only they use");
  rm_cmd->add_option("--job", rm.job, "job name")->required();
  auto* rm_step =
      rm_cmd->add_option("--step", rm.steps, "a step to delete (repeatable)");
  auto* rm_all = rm_cmd->add_flag(
      "--all", rm.all, "delete every step of the job, partial ones included");
  rm_step->excludes(rm_all);
  rm_cmd
      ->add_option("--grace-s", rm.grace_s,
                   "keep chunks written this recently (saves in flight)")
      ->capture_default_str();
  rm_cmd->add_flag("--keep-cold", rm.keep_cold,
                   "delete from the servers' disks only, leaving the steps in "
                   "the durable tier (--rados-pool, --s3-bucket)");
  rm_cmd->footer(
      "A chunk that a remaining step still uses, directly or as the base of "
      "a delta, is kept. The steps go from the disks first, then from the "
      "coordinator's durable tier.");

  JobsArgs jobs;
  auto* jobs_cmd = app.add_subcommand(
      "jobs", "list the jobs on the servers: steps, newest, bytes on disk");
  jobs_cmd->add_flag("--json", jobs.json, "print JSON");

  DemoArgs demo;
  auto* demo_cmd = app.add_subcommand(
      "demo", "save, restore and verify simulated training state");
  demo_cmd->add_option("--servers", demo.servers,
                       "the same as --server (default for demo: an embedded "
                       "server in a temporary directory)");
  demo_cmd->add_option("--ranks", demo.ranks, "simulated ranks")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  demo_cmd->add_option("--steps", demo.steps, "steps to save")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  demo_cmd
      ->add_option("--mib-per-rank", demo.mib_per_rank, "state per rank in MiB")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  demo_cmd->add_option("--job", demo.job,
                       "job name (default: demo-<unix time>, a new job each "
                       "run)");

  DcpArgs import_dcp, export_dcp;
  export_dcp.import = false;
  // The two DCP commands: the same options, --step required to import.
  auto add_dcp = [&app](DcpArgs* d, const char* name, const char* what,
                        const char* dir_help, const char* step_help) {
    auto* cmd = app.add_subcommand(
        name, absl::StrCat(what, " (needs torch >= 2.2: $STAGGER_PYTHON)"));
    cmd->add_option("--dir", d->dir, dir_help)->required();
    cmd->add_option("--job", d->job, "job name")->required();
    auto* step = cmd->add_option("--step", d->step, step_help)
                     ->check(stagger::NonNegative());
    if (d->import) step->required();
    return cmd;
  };
  auto* import_cmd = add_dcp(&import_dcp, "import-dcp",
                             "store a PyTorch DCP checkpoint as a step",
                             "the DCP checkpoint", "the step to store as");
  auto* export_cmd = add_dcp(
      &export_dcp, "export-dcp", "write a step as a PyTorch DCP checkpoint",
      "where to write it", "the step (default: the latest)");

  std::string tls_ca;
  app.add_option("--tls-ca", tls_ca,
                 "PEM CA of the servers' certificates: gRPC over TLS");
  std::string token;
  app.add_option("--token", token,
                 "access token for servers run with --auth-tokens (default: "
                 "$STAGGER_TOKEN)");
  std::string log_level = "warning";
  app.add_option("--log-level", log_level,
                 "debug, info, warning or error (events on stderr)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const std::string hint = UsageHint(app, argc, argv);
    fprintf(stderr, "stagger: %s\n", hint.empty() ? e.what() : hint.c_str());
    fprintf(stderr, "Run 'stagger --help' or 'stagger COMMAND --help'.\n");
    return 2;
  }
  auto level = stagger::log::ParseLevel(log_level);
  if (!level.ok()) {
    fprintf(stderr, "stagger: --log-level: %s\n",
            std::string(level.status().message()).c_str());
    return 2;
  }
  stagger::log::SetLevel(*level);
  stagger::client::SetTlsCaFile(tls_ca);
  if (token.empty() && std::getenv("STAGGER_TOKEN") != nullptr) {
    token = std::getenv("STAGGER_TOKEN");
  }
  stagger::client::SetToken(token);
  ls.server = restore.server = verify.server = gc.server = show.server =
      rm.server = jobs.server = server;
  if (*show_cmd) return RunShow(show);
  if (*ls_cmd) return RunLs(ls);
  if (*restore_cmd) return RunRestore(restore);
  if (*verify_cmd) return RunVerify(verify);
  if (*gc_cmd) return RunGc(gc);
  if (*rm_cmd) return RunRm(rm);
  if (*jobs_cmd) return RunJobs(jobs);
  for (DcpArgs* d : {&import_dcp, &export_dcp}) {
    d->server = server;
    d->token = token;
  }
  if (*import_cmd) return RunDcp(import_dcp);
  if (*export_cmd) return RunDcp(export_dcp);
  if (*demo_cmd) {
    // demo runs an embedded server unless given servers, by either flag.
    if (demo.servers.empty() && server_opt->count() > 0) demo.servers = server;
    return RunDemo(demo);
  }
  return 1;
}
