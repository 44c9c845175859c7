// ValidateOptions (checkpointer_impl.h): every CheckpointerOptions field
// checked before anything starts, with an error naming the field.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/checkpointer_impl.h"
#include "client/shaping.h"
#include "format/names.h"

namespace stagger::client {

Status ValidateOptions(const CheckpointerOptions& o) {
  STAGGER_RETURN_IF_ERROR(format::ValidateName("job", o.job));
  STAGGER_RETURN_IF_ERROR(Shaping::Validate(o));
  if (o.world_size == 0) {
    return absl::InvalidArgumentError("world_size must be at least 1");
  }
  if (o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " must be < world_size ", o.world_size));
  }
  if (o.replicas == 0 || o.replicas > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas ", o.replicas, " must be in [1, 16]"));
  }
  if (o.chunk_size < 4096 || o.chunk_size > (64ull << 20) ||
      o.chunk_size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size ", o.chunk_size,
                     " must be a multiple of 4096 in [4096, 64 MiB]"));
  }
  if (NameOf(o.codec) == "?") {
    return absl::InvalidArgumentError(
        absl::StrCat("codec value ", static_cast<int>(o.codec), " unknown"));
  }
  if (o.zstd_level < 1 || o.zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd_level ", o.zstd_level, " out of range [1, 19]"));
  }
  if (o.max_inflight_chunks == 0 || o.max_inflight_chunks > 1024) {
    return absl::InvalidArgumentError(
        "max_inflight_chunks must be in [1, 1024]");
  }
  if (o.max_outstanding_saves < 1 || o.max_outstanding_saves > 16) {
    return absl::InvalidArgumentError(absl::StrCat("max_outstanding_saves ",
                                                   o.max_outstanding_saves,
                                                   " out of range [1, 16]"));
  }
  if (o.delta_chain_max < 0 || o.delta_chain_max > 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta_chain_max ", o.delta_chain_max, " out of range [0, 32]"));
  }
  if (NameOf(o.background_cpu) == "?") {
    return absl::InvalidArgumentError(
        absl::StrCat("background_cpu value ",
                     static_cast<int>(o.background_cpu), " unknown"));
  }
  if (o.pipeline_threads < 0 || o.pipeline_threads > 64) {
    return absl::InvalidArgumentError("pipeline_threads must be in [0, 64]");
  }
  if (NameOf(o.snapshot_overlap) == "?") {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot_overlap value ",
                     static_cast<int>(o.snapshot_overlap), " unknown"));
  }
  if (!(o.rpc_timeout_s > 0)) {
    return absl::InvalidArgumentError("rpc_timeout_s must be positive");
  }
  if (!(o.server_wait_s >= 0) || !std::isfinite(o.server_wait_s)) {
    return absl::InvalidArgumentError(
        "server_wait_s must be a finite number of seconds >= 0");
  }
  return absl::OkStatus();
}

}  // namespace stagger::client
