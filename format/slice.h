// Slice math for resharding: which bytes of a saved slice of a global
// tensor land where in another slice of it. Both slices are row-major and
// contiguous; the saved one is cut into chunks of `chunk_size` bytes (the
// last one shorter), as format.md describes. Pure computation, no I/O.
//
//   Box saved{{4, 0}, {4, 16}}, wanted{{0, 8}, {16, 8}};
//   auto plan = PlanSliceCopy(saved, wanted, /*element_size=*/4, 4096);
//   for (const auto& [chunk, runs] : *plan)
//     for (const CopyRun& r : runs)  // decoded chunk -> wanted buffer
//       memcpy(dest + r.dst, decoded + r.src, r.length);
//
// All functions are thread-safe (no state).
#ifndef STAGGER_FORMAT_SLICE_H_
#define STAGGER_FORMAT_SLICE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::format {

// A box of a global tensor: `shape` elements starting at `offset` in each
// dimension. A box of rank 0 is a scalar (one element).
struct Box {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  bool operator==(const Box& o) const {
    return offset == o.offset && shape == o.shape;
  }
};

// Number of elements of `b` (1 for a scalar, 0 when a dimension is 0).
uint64_t Elements(const Box& b);

// "[0:4,8:16]" (half-open ranges per dimension); "[]" for a scalar.
std::string BoxString(const Box& b);

// The common part of two boxes of the same rank; nullopt when it holds no
// element.
std::optional<Box> Intersect(const Box& a, const Box& b);

// The elements of `a` outside `b`, as at most 2 * rank disjoint, non-empty
// boxes (`a` itself when they do not overlap; none when `b` covers `a`).
std::vector<Box> Subtract(const Box& a, const Box& b);

// One contiguous copy: `length` bytes at offset `src` of a decoded chunk go
// to byte offset `dst` of the wanted slice's buffer.
struct CopyRun {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t length = 0;
  bool operator==(const CopyRun& o) const {
    return src == o.src && dst == o.dst && length == o.length;
  }
};

// Chunk index -> the runs that read it. A run that continues the one before
// it on both sides is merged into it; within one AddRegionCopy call runs are
// added in increasing `src` order.
using ChunkPlan = std::map<uint64_t, std::vector<CopyRun>>;

// Adds to `plan` the runs that copy `region` from the saved slice `saved`
// into the wanted slice `wanted`. Preconditions (checked by PlanSliceCopy,
// asserted here): the three boxes have one rank, `region` lies inside both
// slices, element_size and chunk_size are positive.
void AddRegionCopy(const Box& saved, const Box& wanted, const Box& region,
                   uint64_t element_size, uint64_t chunk_size, ChunkPlan* plan);

// The runs that fill the part of `wanted` that `saved` holds (an empty plan
// when they do not overlap). INVALID_ARGUMENT when the ranks differ, a
// dimension or offset is negative, or element_size or chunk_size is 0.
Result<ChunkPlan> PlanSliceCopy(const Box& saved, const Box& wanted,
                                uint64_t element_size, uint64_t chunk_size);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_SLICE_H_
