#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/checkpointer_impl.h"
#include "client/chunk_io.h"
#include "client/cli/commands.h"
#include "client/cli/progress.h"
#include "client/cli/session.h"
#include "client/control.h"
#include "client/embedded/embedded.h"
#include "util/time_text.h"

namespace stagger::client {

Result<int64_t> ParseStep(const std::string& text) {
  if (text == "latest") return kLatest;
  int64_t v = 0;
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step must be 'latest' or a number >= 0, got '", text, "'"));
  }
  for (char c : text) v = v * 10 + (c - '0');
  return v;
}

int Usage(const std::string& cmd, absl::string_view message) {
  fprintf(stderr, "stagger %s: %s\n", cmd.c_str(),
          std::string(message).c_str());
  return 2;
}

int Fail(const std::string& cmd, const Status& s) {
  fprintf(stderr, "stagger %s: %s: %s\n", cmd.c_str(),
          absl::StatusCodeToString(s.code()).c_str(),
          std::string(s.message()).c_str());
  return 1;
}

namespace {
std::string& TlsCa() {
  static auto* path = new std::string();
  return *path;
}
}  // namespace

void SetTlsCaFile(std::string path) { TlsCa() = std::move(path); }
const std::string& TlsCaFile() { return TlsCa(); }
std::string& TokenValue() {
  static std::string* t = new std::string();
  return *t;
}
void SetToken(std::string token) { TokenValue() = std::move(token); }
const std::string& Token() { return TokenValue(); }

Result<Session> OpenSession(const std::string& servers) {
  Session s;
  // embedded:DIR: DIR's data served from this process (refused, naming
  // the PID, while a stagger-server holds it).
  STAGGER_ASSIGN_OR_RETURN(ResolvedServers resolved, ResolveServers(servers));
  s.embedded = std::move(resolved.keepalive);
  STAGGER_ASSIGN_OR_RETURN(s.transport, SharedUcxTransport());
  // Goes on while one server answers (the others are marked down, with a
  // warning): a restore reads whichever copy is up, and what cannot be
  // read is named then.
  STAGGER_ASSIGN_OR_RETURN(
      s.servers,
      ServerSet::Connect(resolved.addresses, s.transport.get(), 60, TlsCaFile(),
                         /*tolerate_down=*/true, Token()));
  s.servers->SetLocalNode(ServerSet::DefaultNode());
  s.executor = std::make_unique<Executor>(ChunkIo::DefaultFetchThreads());
  return s;
}

namespace {

std::string Time(int64_t unix_ms) {
  return unix_ms == 0 ? "-" : UtcTimeText(unix_ms);
}

// "memory", "disk,cold", each name between `quote`s.
std::string TierList(const StepTiers& t, const char* quote, const char* sep) {
  std::vector<std::string> names;
  if (t.memory) names.push_back(absl::StrCat(quote, "memory", quote));
  if (t.disk) names.push_back(absl::StrCat(quote, "disk", quote));
  if (t.cold) names.push_back(absl::StrCat(quote, "cold", quote));
  return absl::StrJoin(names, sep);
}

}  // namespace

int RunLs(const LsArgs& a) {
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("ls", session.status());
  uint64_t disk = 0;
  std::map<int64_t, StepTiers> tiers;
  auto steps = ListSteps(*session->servers, a.job, /*include_partial=*/true,
                         &disk, &tiers);
  if (!steps.ok()) return Fail("ls", steps.status());
  const size_t servers_up = session->servers->up();
  if (a.json) {
    std::vector<std::string> rows;
    for (const pb::StepInfo& s : *steps) {
      rows.push_back(absl::StrCat(
          "{\"step\":", s.step(), ",\"state\":\"",
          s.complete() ? "complete" : "partial", "\",\"world_size\":",
          s.world_size(), ",\"ranks_committed\":", s.committed_ranks_size(),
          ",\"raw_bytes\":", s.raw_bytes(), ",\"stored_bytes\":",
          s.stored_bytes(), ",\"new_bytes\":", s.shipped_bytes(),
          ",\"created\":\"", Time(s.created_unix_ms()), "\",\"tiers\":[",
          TierList(tiers[s.step()], "\"", ","), "],\"level\":\"", Level(s),
          "\"}"));
    }
    printf(
        "{\"job\":\"%s\",\"disk_bytes\":%llu,\"servers\":%zu,\"steps\":[%s]}\n",
        a.job.c_str(), static_cast<unsigned long long>(disk), servers_up,
        absl::StrJoin(rows, ",").c_str());
    return steps->empty() ? 1 : 0;  // nothing there, as restore says
  }
  // STORED_BYTES: what the step's chunks occupy, shared ones included;
  // NEW_BYTES: what this step shipped (its increment over earlier steps).
  printf("%-10s %-9s %-6s %-7s %14s %14s %14s  %-20s  %s\n", "STEP", "STATE",
         "LEVEL", "RANKS", "RAW_BYTES", "STORED_BYTES", "NEW_BYTES", "CREATED",
         "TIERS");
  for (const pb::StepInfo& s : *steps) {
    std::string ranks =
        absl::StrCat(s.committed_ranks_size(), "/", s.world_size());
    printf("%-10lld %-9s %-6s %-7s %14llu %14llu %14llu  %-20s  %s\n",
           static_cast<long long>(s.step()),
           s.complete() ? "complete" : "partial", Level(s), ranks.c_str(),
           static_cast<unsigned long long>(s.raw_bytes()),
           static_cast<unsigned long long>(s.stored_bytes()),
           static_cast<unsigned long long>(s.shipped_bytes()),
           Time(s.created_unix_ms()).c_str(),
           TierList(tiers[s.step()], "", ",").c_str());
  }
  if (steps->empty()) {
    // Exit 1, as restore of a step that does not exist: a typo in --job
    // must not look like an empty job.
    fprintf(stderr, "stagger ls: job '%s' has no steps on %zu server%s\n",
            a.job.c_str(), servers_up, servers_up == 1 ? "" : "s");
    return 1;
  }
  // What `du` finds of the job: every segment file, reserved space and
  // bytes that gc freed but compaction has not reclaimed yet included. On
  // stderr, like the line above: stdout stays the table alone, for scripts.
  fprintf(stderr, "job %s: %llu bytes in segment files on %zu server%s\n",
          a.job.c_str(), static_cast<unsigned long long>(disk), servers_up,
          servers_up == 1 ? "" : "s");
  return 0;
}

namespace {

// A job whose bytes on disk belong to no step, complete or partial.
bool InNoStep(const pb::JobInfo& j) {
  return j.steps_complete() == 0 && j.steps_partial() == 0 &&
         j.disk_bytes() > 0;
}

}  // namespace

int RunJobs(const JobsArgs& a) {
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("jobs", session.status());
  auto jobs = ListJobs(*session->servers);
  if (!jobs.ok()) return Fail("jobs", jobs.status());
  const size_t servers_up = session->servers->up();
  if (a.json) {
    std::vector<std::string> rows;
    for (const pb::JobInfo& j : *jobs) {
      rows.push_back(absl::StrCat(
          "{\"job\":\"", j.job(), "\",\"steps\":", j.steps_complete(),
          ",\"partial\":", j.steps_partial(), ",\"latest\":",
          j.latest_complete() < 0 ? std::string("null")
                                  : absl::StrCat(j.latest_complete()),
          ",\"disk_bytes\":", j.disk_bytes(),
          ",\"bytes_in_no_step\":", InNoStep(j) ? j.disk_bytes() : 0, "}"));
    }
    printf("{\"servers\":%zu,\"jobs\":[%s]}\n", servers_up,
           absl::StrJoin(rows, ",").c_str());
    return 0;
  }
  // STEPS: complete ones; PARTIAL: started, not (yet) complete; DISK_BYTES:
  // the job's segment files on every server, as `du` finds them.
  printf("%-32s %8s %8s %10s %16s\n", "JOB", "STEPS", "PARTIAL", "LATEST",
         "DISK_BYTES");
  for (const pb::JobInfo& j : *jobs) {
    const std::string latest = j.latest_complete() < 0
                                   ? std::string("-")
                                   : absl::StrCat(j.latest_complete());
    printf("%-32s %8llu %8llu %10s %16llu\n", j.job().c_str(),
           static_cast<unsigned long long>(j.steps_complete()),
           static_cast<unsigned long long>(j.steps_partial()), latest.c_str(),
           static_cast<unsigned long long>(j.disk_bytes()));
  }
  for (const pb::JobInfo& j : *jobs) {
    if (!InNoStep(j)) continue;
    fprintf(stderr,
            "job '%s': its %llu bytes belong to no step (a save that never "
            "committed, or steps removed within the grace period); 'stagger "
            "rm --job %s --all' deletes them once the grace period is over\n",
            j.job().c_str(), static_cast<unsigned long long>(j.disk_bytes()),
            j.job().c_str());
  }
  fprintf(stderr, "%zu job%s on %zu server%s\n", jobs->size(),
          jobs->size() == 1 ? "" : "s", servers_up, servers_up == 1 ? "" : "s");
  return 0;
}

}  // namespace stagger::client
