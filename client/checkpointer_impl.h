// The Checkpointer behind include/stagger/checkpointer.h. The public
// Checkpointer::Open lives in client/embedded/ (it may start an embedded
// server); this core library never depends on server code.
//
//   CheckpointerImpl ─┬─ transport (shared, process-wide UCX by default)
//                     ├─ ServerSet (gRPC stubs + data connections)
//                     ├─ Shaping (pacing, stagger slot, collective gate)
//                     ├─ Executors: pipeline (fingerprint, encode), driver
//                     │   (a thread per outstanding save), fetch (decode)
//                     ├─ SnapshotSources: host, one per CUDA device
//                     ├─ Staging (the pool; memory.h, spare_pool.h)
//                     ├─ CodecPolicy + ChunkIo (puts via the Sender,
//                     │   fetches for loads: chunk_io.h, loader.h)
//                     ├─ StepGuard (committed steps are final)
//                     ├─ registered TensorSpecs, and per tensor the
//                     │   chunk history deltas are planned from
//                     │   (save_plan.h); each Save() runs a SaveJob
//                     │   (save_job.h)
//                     └─ metrics (and their HTTP exporter)
#ifndef STAGGER_CLIENT_CHECKPOINTER_IMPL_H_
#define STAGGER_CLIENT_CHECKPOINTER_IMPL_H_

#include <memory>
#include <string>

#include "stagger/checkpointer.h"
#include "transport/transport.h"

namespace stagger::client {

// Validates options (INVALID_ARGUMENT naming the field), connects to
// `servers` (gRPC addresses) over `transport` and returns a Checkpointer.
// `keepalive` is held for the Checkpointer's lifetime (e.g. an embedded
// server); it is released after the connections close.
Result<std::unique_ptr<Checkpointer>> NewCheckpointer(
    const CheckpointerOptions& options, const std::string& servers,
    std::shared_ptr<transport::Transport> transport,
    std::shared_ptr<void> keepalive);

// Checks the fields of `options` other than `servers`.
Status ValidateOptions(const CheckpointerOptions& options);

// The process-wide UCX transport, created on first use and kept while
// anyone holds it.
Result<std::shared_ptr<transport::Transport>> SharedUcxTransport();

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CHECKPOINTER_IMPL_H_
