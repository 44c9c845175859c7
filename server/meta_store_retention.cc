// MetaStore: which steps go (retention, deletion by name);
// DeleteStepsLocked (meta_store.cc) deletes them.
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "format/names.h"
#include "server/meta_store.h"

namespace stagger::server {

Result<GcResult> MetaStore::Gc(const std::string& job, uint32_t keep,
                               int64_t grace_ms, bool spare_undrained) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  if (keep == 0) {
    return absl::InvalidArgumentError("gc must keep at least one step");
  }
  if (grace_ms < 0) return absl::InvalidArgumentError("grace must be >= 0");
  absl::MutexLock lock(&commit_mu_);  // no commit while we decide
  STAGGER_ASSIGN_OR_RETURN(auto steps,
                           ListSteps(job, /*include_partial=*/true));
  // Keep the newest `keep` complete steps and every partial step newer than
  // the oldest kept one (a save may still be completing it).
  // A memory-level step does not count: until it is on disk, a crash of
  // its servers may take it, and the disk-level steps before it must stay.
  std::vector<int64_t> complete;
  for (const auto& s : steps) {
    if (s.complete() && s.memory_ranks().empty()) complete.push_back(s.step());
  }
  // A server without the job's manifests cannot tell what is live (it may
  // hold only chunks of a job coordinated elsewhere): it deletes nothing.
  if (steps.empty()) return GcResult{};
  // With no step to delete it still collects: chunks that an earlier gc
  // kept for its grace period, and those of saves that never committed.
  std::set<int64_t> doomed;
  std::set<int64_t> drained;
  if (spare_undrained) {
    STAGGER_ASSIGN_OR_RETURN(drained, DrainedSteps(job));
  }
  if (complete.size() > keep) {
    const int64_t oldest_kept = complete[complete.size() - keep];
    for (const auto& s : steps) {
      const bool spared =
          spare_undrained && s.complete() && drained.count(s.step()) == 0;
      if (s.step() < oldest_kept && !spared) doomed.insert(s.step());
    }
  }
  return DeleteStepsLocked(job, steps, doomed, grace_ms);
}

Result<GcResult> MetaStore::DeleteSteps(const std::string& job,
                                        const std::vector<int64_t>& wanted,
                                        bool all, int64_t grace_ms) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", job));
  if (all == !wanted.empty()) {
    return absl::InvalidArgumentError(
        "delete steps: name the steps or ask for all of them, not both");
  }
  if (grace_ms < 0) return absl::InvalidArgumentError("grace must be >= 0");
  for (int64_t s : wanted) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("delete steps: step ", s, " is negative"));
    }
  }
  absl::MutexLock lock(&commit_mu_);  // no commit while we decide
  STAGGER_ASSIGN_OR_RETURN(auto steps,
                           ListSteps(job, /*include_partial=*/true));
  // As Gc: a server without the job's manifests (one that holds only
  // chunks of it, or none) cannot tell what is live.
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "job '", job, "' has no steps on this server; nothing was deleted"));
  }
  std::set<int64_t> doomed(wanted.begin(), wanted.end());
  if (all) {
    for (const auto& s : steps) doomed.insert(s.step());
  }
  std::set<int64_t> missing = doomed;
  for (const auto& s : steps) missing.erase(s.step());
  if (!missing.empty()) {
    // The steps there are: all of them, or the range of a long job's.
    std::string held;
    if (steps.size() <= 10) {
      for (const auto& s : steps) {
        absl::StrAppend(&held, held.empty() ? "" : ", ", s.step());
      }
    } else {
      held = absl::StrCat(steps.size(), " from ", steps.front().step(), " to ",
                          steps.back().step());
    }
    return absl::NotFoundError(absl::StrCat(
        "job '", job, "' has no step ", absl::StrJoin(missing, ", "),
        " on this server (steps: ", held, "); nothing was deleted"));
  }
  return DeleteStepsLocked(job, steps, doomed, grace_ms);
}

}  // namespace stagger::server
