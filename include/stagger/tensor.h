// TensorSpec: a tensor registered with a Checkpointer. The Checkpointer does
// not own the memory; it must stay valid while registered.
#ifndef STAGGER_TENSOR_H_
#define STAGGER_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace stagger {

enum class Device { kHost, kCuda };

struct TensorSpec {
  std::string name;   // [A-Za-z0-9._-]{1,128}, unique
  std::string dtype;  // "F32", "BF16", "F16", "F64", "I64", ... "U8", "BOOL"
  std::vector<int64_t> shape;  // this rank's slice
  void* data = nullptr;        // contiguous, row-major
  Device device = Device::kHost;
  int device_index = 0;
  // Which slice of the global tensor this rank holds (row, column or block
  // sharding), so that a step saved by N ranks loads on M. Both empty: a
  // per-rank tensor, saved and loaded by each rank on its own. global_shape
  // equal to shape (offset all zeros): a replicated tensor, stored once (by
  // rank 0) and loaded by every rank.
  std::vector<int64_t> global_shape;
  std::vector<int64_t> global_offset;
};

}  // namespace stagger

#endif  // STAGGER_TENSOR_H_
