// Retention in the cold store (--rados-keep): per job, the newest `keep`
// steps stay; older ones go (their step object first, so a step half
// deleted is never listed, then their manifests), and then every chunk
// object that no kept step needs, directly or as a delta base (followed
// through the objects themselves: a rebase may have made the stored
// record a delta of another chunk than its manifest says), unless written
// within the grace period (a drain of this or another server may be about
// to write the manifest that names it).
//
// Thread-safety: one gc per job at a time (the drain runs it after its
// passes); the store is thread-safe.
#ifndef STAGGER_SERVER_TIER_COLD_GC_H_
#define STAGGER_SERVER_TIER_COLD_GC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/tier/object_store.h"

namespace stagger::server::tier {

struct ColdGcResult {
  std::vector<int64_t> steps_deleted;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_freed = 0;
  uint64_t grace_kept = 0;  // unneeded chunks spared for their grace
};

// With no step to delete it still collects unneeded chunks past their
// grace (spared by an earlier gc); a job with no step in the store is left
// alone. INVALID_ARGUMENT for keep == 0.
Result<ColdGcResult> GcColdJob(ObjectStore* store, const std::string& job,
                               uint32_t keep, int64_t grace_s,
                               int64_t now_unix_s);

// `stagger rm` in the cold store: deletes `steps` of `job` (those the
// store holds), or with `all` every step and every chunk of the job past
// its grace (a job whose first save was abandoned has chunks and no step),
// in the same order as GcColdJob, and then the chunks no remaining step
// needs, past their grace.
Result<ColdGcResult> RemoveColdSteps(ObjectStore* store, const std::string& job,
                                     const std::vector<int64_t>& steps,
                                     bool all, int64_t grace_s,
                                     int64_t now_unix_s);

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_COLD_GC_H_
