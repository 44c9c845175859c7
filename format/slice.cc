#include "format/slice.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace stagger::format {
namespace {

Status CheckBox(const char* what, const Box& b) {
  if (b.offset.size() != b.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " slice has ", b.shape.size(), " dimensions but ",
                     b.offset.size(), " offsets"));
  }
  for (size_t i = 0; i < b.shape.size(); ++i) {
    if (b.shape[i] < 0 || b.offset[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " slice ", BoxString(b), " has a negative ",
                       b.shape[i] < 0 ? "dimension" : "offset"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t Elements(const Box& b) {
  uint64_t n = 1;
  for (int64_t d : b.shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string BoxString(const Box& b) {
  std::string s = "[";
  for (size_t i = 0; i < b.shape.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", b.offset[i], ":",
                    b.offset[i] + b.shape[i]);
  }
  return s + "]";
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  assert(a.shape.size() == b.shape.size());
  Box out;
  out.offset.resize(a.shape.size());
  out.shape.resize(a.shape.size());
  for (size_t i = 0; i < a.shape.size(); ++i) {
    int64_t lo = std::max(a.offset[i], b.offset[i]);
    int64_t hi = std::min(a.offset[i] + a.shape[i], b.offset[i] + b.shape[i]);
    if (hi <= lo) return std::nullopt;
    out.offset[i] = lo;
    out.shape[i] = hi - lo;
  }
  return out;
}

std::vector<Box> Subtract(const Box& a, const Box& b) {
  if (Elements(a) == 0) return {};
  std::optional<Box> common = Intersect(a, b);
  if (!common) return {a};
  // Peel off the parts of `a` below and above the common box, one
  // dimension at a time, narrowing what is left to the common range.
  std::vector<Box> out;
  Box rest = a;
  for (size_t i = 0; i < a.shape.size(); ++i) {
    const int64_t lo = common->offset[i], hi = lo + common->shape[i];
    const int64_t end = rest.offset[i] + rest.shape[i];
    if (rest.offset[i] < lo) {
      Box below = rest;
      below.shape[i] = lo - rest.offset[i];
      out.push_back(std::move(below));
    }
    if (hi < end) {
      Box above = rest;
      above.offset[i] = hi;
      above.shape[i] = end - hi;
      out.push_back(std::move(above));
    }
    rest.offset[i] = lo;
    rest.shape[i] = hi - lo;
  }
  return out;
}

namespace {

// Adds the copy of `len` bytes at `src` in the saved slice to `dst` in the
// wanted one, split at chunk boundaries; a run that continues the chunk's
// last one on both sides extends it. *cur caches the chunk last added to.
void AddRun(uint64_t src, uint64_t dst, uint64_t len, uint64_t chunk_size,
            ChunkPlan* plan, ChunkPlan::iterator* cur) {
  while (len > 0) {
    const uint64_t chunk = src / chunk_size;
    const uint64_t in = src - chunk * chunk_size;
    const uint64_t take = std::min(len, chunk_size - in);
    if (*cur == plan->end() || (*cur)->first != chunk) {
      *cur = plan->try_emplace(chunk).first;
    }
    std::vector<CopyRun>& runs = (*cur)->second;
    if (!runs.empty() && runs.back().src + runs.back().length == in &&
        runs.back().dst + runs.back().length == dst) {
      runs.back().length += take;
    } else {
      runs.push_back({in, dst, take});
    }
    src += take;
    dst += take;
    len -= take;
  }
}

}  // namespace

void AddRegionCopy(const Box& saved, const Box& wanted, const Box& region,
                   uint64_t element_size, uint64_t chunk_size,
                   ChunkPlan* plan) {
  const size_t n = region.shape.size();
  assert(saved.shape.size() == n && wanted.shape.size() == n);
  assert(element_size > 0 && chunk_size > 0);
  if (Elements(region) == 0) return;
  // Row-major strides, in elements.
  std::vector<uint64_t> saved_stride(n), wanted_stride(n);
  uint64_t s = 1, w = 1;
  for (size_t i = n; i-- > 0;) {
    saved_stride[i] = s;
    wanted_stride[i] = w;
    s *= static_cast<uint64_t>(saved.shape[i]);
    w *= static_cast<uint64_t>(wanted.shape[i]);
  }
  // One run spans dimensions [outer, n): every dimension after `outer`
  // covers the full extent of both slices, so consecutive rows there are
  // contiguous on both sides.
  size_t outer = 0;
  uint64_t run = 1;
  if (n > 0) {
    outer = n - 1;
    run = static_cast<uint64_t>(region.shape[outer]);
    while (outer > 0 && region.shape[outer] == saved.shape[outer] &&
           region.shape[outer] == wanted.shape[outer]) {
      --outer;
      run *= static_cast<uint64_t>(region.shape[outer]);
    }
  }
  uint64_t src0 = 0, dst0 = 0;  // the region's first element
  for (size_t i = 0; i < n; ++i) {
    assert(region.offset[i] >= saved.offset[i] &&
           region.offset[i] + region.shape[i] <=
               saved.offset[i] + saved.shape[i]);
    assert(region.offset[i] >= wanted.offset[i] &&
           region.offset[i] + region.shape[i] <=
               wanted.offset[i] + wanted.shape[i]);
    src0 += static_cast<uint64_t>(region.offset[i] - saved.offset[i]) *
            saved_stride[i];
    dst0 += static_cast<uint64_t>(region.offset[i] - wanted.offset[i]) *
            wanted_stride[i];
  }
  ChunkPlan::iterator cur = plan->end();
  std::vector<int64_t> index(outer, 0);  // position in dimensions [0, outer)
  while (true) {
    uint64_t src = src0, dst = dst0;
    for (size_t i = 0; i < outer; ++i) {
      src += static_cast<uint64_t>(index[i]) * saved_stride[i];
      dst += static_cast<uint64_t>(index[i]) * wanted_stride[i];
    }
    AddRun(src * element_size, dst * element_size, run * element_size,
           chunk_size, plan, &cur);
    bool done = true;
    for (size_t i = outer; i-- > 0;) {
      if (++index[i] < region.shape[i]) {
        done = false;
        break;
      }
      index[i] = 0;
    }
    if (done) break;
  }
}

Result<ChunkPlan> PlanSliceCopy(const Box& saved, const Box& wanted,
                                uint64_t element_size, uint64_t chunk_size) {
  STAGGER_RETURN_IF_ERROR(CheckBox("saved", saved));
  STAGGER_RETURN_IF_ERROR(CheckBox("wanted", wanted));
  if (saved.shape.size() != wanted.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved slice ", BoxString(saved), " and wanted slice ",
        BoxString(wanted), " have different numbers of dimensions"));
  }
  if (element_size == 0 || chunk_size == 0) {
    return absl::InvalidArgumentError(
        "element size and chunk size must be positive");
  }
  ChunkPlan plan;
  std::optional<Box> region = Intersect(saved, wanted);
  if (region) {
    AddRegionCopy(saved, wanted, *region, element_size, chunk_size, &plan);
  }
  return plan;
}

}  // namespace stagger::format
