// stagger: the operator's CLI.
//   stagger [--server HOST:PORT] ls --job J [--json]
//   stagger [--server HOST:PORT] restore --job J --step latest|N --out DIR
//                                        [--consolidate]
//   stagger [--server HOST:PORT] verify --job J --step latest|N
//   stagger [--server HOST:PORT[,...]] show --job J [--step N] [--json]
//   stagger [--server HOST:PORT[,...]] gc --job J --keep N [--grace-s S]
//   stagger demo [--servers HOST:PORT[,...]]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/session.h"
#include "util/log.h"

int main(int argc, char** argv) {
  using namespace stagger::client;
  CLI::App app{"stagger: checkpoints for deep-learning training"};
  app.require_subcommand(1);
  std::string server = "127.0.0.1:7700";
  app.add_option("--server", server,
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
  gc_cmd->add_option("--keep", gc.keep, "complete steps to keep")
      ->required()
      ->check(CLI::PositiveNumber);
  gc_cmd
      ->add_option("--grace-s", gc.grace_s,
                   "keep chunks written this recently (saves in flight)")
      ->capture_default_str();

  DemoArgs demo;
  auto* demo_cmd = app.add_subcommand(
      "demo", "save, restore and verify simulated training state");
  demo_cmd->add_option("--servers", demo.servers,
                       "HOST:PORT[,...] of running servers (default: an "
                       "embedded server in a temporary directory)");
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
  demo_cmd->add_option("--job", demo.job, "job name")->capture_default_str();

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
  CLI11_PARSE(app, argc, argv);
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
  ls.server = restore.server = verify.server = gc.server = show.server = server;
  if (*show_cmd) return RunShow(show);
  if (*ls_cmd) return RunLs(ls);
  if (*restore_cmd) return RunRestore(restore);
  if (*verify_cmd) return RunVerify(verify);
  if (*gc_cmd) return RunGc(gc);
  if (*demo_cmd) return RunDemo(demo);
  return 1;
}
