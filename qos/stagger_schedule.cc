#include "qos/stagger_schedule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace stagger::qos {
namespace {

// start(rank) from the header's formula. 128-bit arithmetic: S and the slot
// index may both be large.
int64_t StartOffset(int64_t span_ns, int64_t rank, int64_t ranks_per_node,
                    int64_t nodes) {
  const int64_t node = rank / ranks_per_node;
  const int64_t local = rank % ranks_per_node;
  const __int128 index = static_cast<__int128>(node) * ranks_per_node + local;
  const __int128 slots = static_cast<__int128>(nodes) * ranks_per_node;
  return static_cast<int64_t>(static_cast<__int128>(span_ns) * index / slots);
}

}  // namespace

Result<StaggerSlot> ComputeStaggerSlot(const StaggerOptions& o) {
  if (o.world_size < 1 || o.ranks_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stagger: world_size ", o.world_size, " and ranks_per_node ",
        o.ranks_per_node, " must be >= 1"));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stagger: rank ", o.rank, " outside [0, ", o.world_size, ")"));
  }
  if (o.window_ns < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stagger: negative window ", o.window_ns, " ns"));
  }
  if (!(o.spread >= 0 && o.spread <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stagger: spread ", o.spread, " outside [0, 1]"));
  }
  const int64_t nodes =
      (int64_t{o.world_size} + o.ranks_per_node - 1) / o.ranks_per_node;
  // Compared in double first: a cast of a double >= 2^63 is undefined.
  const double span_d = std::floor(o.spread * static_cast<double>(o.window_ns));
  const int64_t span = span_d >= static_cast<double>(o.window_ns)
                           ? o.window_ns
                           : static_cast<int64_t>(span_d);
  const int64_t start = StartOffset(span, o.rank, o.ranks_per_node, nodes);
  const int64_t last =
      StartOffset(span, o.world_size - 1, o.ranks_per_node, nodes);
  StaggerSlot slot;
  slot.start_offset_ns = start;
  slot.deadline_offset_ns = start + (o.window_ns - last);
  return slot;
}

}  // namespace stagger::qos
