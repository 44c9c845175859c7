// The `stagger` CLI's subcommands. Each returns the process exit code and
// prints its own errors ("stagger <cmd>: CODE: message") to stderr.
#ifndef STAGGER_CLIENT_CLI_COMMANDS_H_
#define STAGGER_CLIENT_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "stagger/status.h"

namespace stagger::client {

// Parses "latest" or a step number >= 0 (kLatest for "latest").
Result<int64_t> ParseStep(const std::string& text);

// Prints `s` as "stagger <cmd>: CODE: message" and returns 1.
int Fail(const std::string& cmd, const Status& s);
// A usage error (a flag's value, flags that do not go together): prints
// "stagger <cmd>: message" and returns 2; nothing was asked of a server.
int Usage(const std::string& cmd, absl::string_view message);

struct LsArgs {
  std::string server, job;
  bool json = false;
};
int RunLs(const LsArgs& a);

struct RestoreArgs {
  std::string server, job, step = "latest", out;
  // One model.safetensors of global tensors instead of a file per rank.
  bool consolidate = false;
  // With consolidate: only the tensors under these prefixes ("model"),
  // the prefix stripped, so the file loads straight into the module.
  std::vector<std::string> only;
  // Write into a directory that is not empty (files of the same names are
  // replaced).
  bool force = false;
};
int RunRestore(const RestoreArgs& a);

struct VerifyArgs {
  std::string server, job, step = "latest";
  bool repair = false;  // rewrite bad and missing copies from good ones
};
int RunVerify(const VerifyArgs& a);

// Per-rank report of a step: stall, snapshot and durable times, bytes raw
// and shipped, codec mix, QoS yield, servers used.
struct ShowArgs {
  std::string server, job, step = "latest";
  bool json = false;
};
int RunShow(const ShowArgs& a);

// The jobs on the servers: steps, the newest complete one, disk bytes.
struct JobsArgs {
  std::string server;
  bool json = false;
};
int RunJobs(const JobsArgs& a);
struct GcArgs {
  std::string server, job;
  uint32_t keep = 1;
  double grace_s = 600;
  bool keep_cold = false;  // leave the durable tier alone
};
int RunGc(const GcArgs& a);
// Deletes some steps of a job, or all of them, and what only they use.
struct RmArgs {
  std::string server, job;
  std::vector<std::string> steps;  // step numbers
  bool all = false;
  double grace_s = 600;
  bool keep_cold = false;  // leave them in the durable tier
};
int RunRm(const RmArgs& a);

struct DemoArgs {
  std::string servers;  // empty: embedded in a temporary directory
  uint32_t ranks = 4;
  int steps = 3;
  uint64_t mib_per_rank = 16;
  std::string job;  // empty: demo-<unix time>
};
int RunDemo(const DemoArgs& a);

// `stagger import-dcp` / `export-dcp`: PyTorch DCP checkpoints in and out,
// through DCP's own code: runs `python3 -m stagger.torch.dcp` (the Python
// package beside this binary; $STAGGER_PYTHON picks the interpreter, which
// needs torch >= 2.2). Returns only on failure to start it.
struct DcpArgs {
  std::string server, token;
  bool import = true;          // else export
  std::string dir, job, step;  // step empty: export the latest
};
int RunDcp(const DcpArgs& a);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_COMMANDS_H_
