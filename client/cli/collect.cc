// `stagger gc` and `stagger rm`: deleting steps and the chunks only they
// use, then compacting (client/control.h Gc, DeleteSteps).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/progress.h"
#include "client/cli/session.h"
#include "client/control.h"
#include "util/time_text.h"

namespace stagger::client {
namespace {

Status CheckGrace(double grace_s) {
  if (!(grace_s >= 0) || grace_s > 1e9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grace-s must be a number of seconds >= 0, got ", grace_s));
  }
  return absl::OkStatus();
}

// What `cmd` did, on stdout; a failed compaction on stderr.
void PrintCollected(const std::string& cmd, const std::string& job,
                    const pb::GcReply& r, double grace_s, size_t servers) {
  std::vector<std::string> steps;
  for (int64_t s : r.steps_deleted()) steps.push_back(absl::StrCat(s));
  printf(
      "%s job '%s': deleted %d step%s [%s], kept %llu; freed %llu chunks "
      "(%llu stored bytes) on %zu server%s\n",
      cmd.c_str(), job.c_str(), r.steps_deleted_size(),
      r.steps_deleted_size() == 1 ? "" : "s", absl::StrJoin(steps, ",").c_str(),
      static_cast<unsigned long long>(r.steps_kept()),
      static_cast<unsigned long long>(r.chunks_deleted()),
      static_cast<unsigned long long>(r.bytes_freed()), servers,
      servers == 1 ? "" : "s");
  if (r.has_cold() && !r.cold().error().empty()) {
    fprintf(stderr,
            "stagger %s: the disks are done; the durable tier %s was not: %s\n",
            cmd.c_str(), r.cold().store().c_str(), r.cold().error().c_str());
  } else if (r.has_cold()) {
    const pb::ColdCollected& c = r.cold();
    std::vector<std::string> cold_steps;
    for (int64_t s : c.steps_deleted()) cold_steps.push_back(absl::StrCat(s));
    printf(
        "cold: deleted %d step%s [%s] and %llu chunks (%llu bytes) in %s%s\n",
        c.steps_deleted_size(), c.steps_deleted_size() == 1 ? "" : "s",
        absl::StrJoin(cold_steps, ",").c_str(),
        static_cast<unsigned long long>(c.chunks_deleted()),
        static_cast<unsigned long long>(c.bytes_freed()), c.store().c_str(),
        c.grace_kept() > 0
            ? absl::StrCat("; kept ", c.grace_kept(),
                           " unneeded chunks written within the grace")
                  .c_str()
            : "");
  }
  const pb::GraceKept& g = r.grace_kept();
  if (g.chunks() > 0) {
    // Chunks no step needs but written within the grace: a save in flight
    // may be about to commit them.
    printf(
        "grace: kept %llu unreferenced chunks (%llu stored bytes) written in "
        "the last %g s; a %s after %s frees them (or --grace-s 0 now, if no "
        "save of the job is running)\n",
        static_cast<unsigned long long>(g.chunks()),
        static_cast<unsigned long long>(g.bytes()), grace_s, cmd.c_str(),
        UtcTimeText(g.until_unix_ms()).c_str());
  }
  if (r.has_compaction()) {
    const pb::CompactionReport& c = r.compaction();
    printf(
        "compaction: removed %llu segments, rewrote %llu bytes, reclaimed "
        "%llu bytes%s\n",
        static_cast<unsigned long long>(c.segments_removed()),
        static_cast<unsigned long long>(c.bytes_copied()),
        static_cast<unsigned long long>(c.bytes_reclaimed()),
        c.pending() ? " so far (still running)" : "");
    // The steps and index entries are gone either way; the next gc's
    // compaction retries the space.
    if (!c.error().empty()) {
      fprintf(stderr, "stagger %s: compaction failed: %s\n", cmd.c_str(),
              c.error().c_str());
    }
  }
}

}  // namespace

int RunGc(const GcArgs& a) {
  if (a.keep == 0) return Usage("gc", "--keep must be at least 1");
  if (Status s = CheckGrace(a.grace_s); !s.ok()) {
    fprintf(stderr, "stagger gc: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("gc", session.status());
  Progress progress("gc", session->servers->size(), /*bytes=*/false);
  auto r = Gc(
      *session->servers, a.job, a.keep, static_cast<int64_t>(a.grace_s * 1000),
      [&progress] { progress.Add(1); }, a.keep_cold);
  progress.Finish();
  if (!r.ok()) return Fail("gc", r.status());
  PrintCollected("gc", a.job, *r, a.grace_s, session->servers->size());
  return r->cold().error().empty() ? 0 : 1;
}

int RunRm(const RmArgs& a) {
  // Usage errors (exit 2): nothing is asked of a server.
  auto usage = [](const std::string& message) {
    fprintf(stderr, "stagger rm: %s\n", message.c_str());
    return 2;
  };
  if (a.all == !a.steps.empty()) {
    return usage("name the steps to delete (--step N, repeatable) or --all");
  }
  std::vector<int64_t> steps;
  for (const std::string& text : a.steps) {
    auto step = ParseStep(text);
    if (!step.ok() || *step == kLatest) {
      return usage("--step must be a step number >= 0, got '" + text + "'");
    }
    steps.push_back(*step);
  }
  if (Status s = CheckGrace(a.grace_s); !s.ok()) {
    return usage(std::string(s.message()));
  }
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("rm", session.status());
  Progress progress("rm", session->servers->size(), /*bytes=*/false);
  auto r = DeleteSteps(
      *session->servers, a.job, steps, a.all,
      static_cast<int64_t>(a.grace_s * 1000), [&progress] { progress.Add(1); },
      a.keep_cold);
  progress.Finish();
  if (!r.ok()) return Fail("rm", r.status());
  PrintCollected("rm", a.job, *r, a.grace_s, session->servers->size());
  return r->cold().error().empty() ? 0 : 1;
}

}  // namespace stagger::client
