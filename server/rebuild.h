// RebuildIndex: `stagger-server --data DIR --rebuild-index`. Restores the
// metadata (RocksDB at DIR/meta) from the rest of the data directory: the
// chunk index from the records of every job's segments, the steps from the
// manifest logs (server/manifest_log.h). The old DIR/meta, if any, is kept
// as DIR/meta.before-rebuild-<unix seconds>.
//
// A chunk found in several records is indexed at the last whole one found
// (each is intact: Scan verifies what it returns), else at the last delta
// whose base resolves without a cycle; a delta's base is read from its
// payload. Manifests are committed as a multi-server client's
// are (a chunk missing here is taken as its manifest describes it), in log
// order; a manifest the new index refuses is reported and skipped. Rebuilt
// chunks count as just written, so a gc spares them for its grace period.
#ifndef STAGGER_SERVER_REBUILD_H_
#define STAGGER_SERVER_REBUILD_H_

#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::server {

struct RebuildReport {
  uint64_t jobs = 0;
  uint64_t segments_records = 0;  // intact records indexed
  uint64_t chunks = 0;            // distinct chunks indexed
  uint64_t torn = 0;              // segments that ended in a torn record
  uint64_t manifests = 0;         // committed
  uint64_t manifests_refused = 0;
  uint64_t steps_complete = 0;
  // Chunks the manifests reference that no segment here holds: on the
  // job's other servers, or lost (stagger verify tells).
  uint64_t chunks_elsewhere = 0;
  std::string old_meta;  // where the previous metadata went ("" if none)
  std::vector<std::string> problems;  // one line each
};

Result<RebuildReport> RebuildIndex(const std::string& data_dir);

}  // namespace stagger::server

#endif  // STAGGER_SERVER_REBUILD_H_
