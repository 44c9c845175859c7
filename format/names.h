// Validation of names and tensor descriptions that cross a boundary: job and
// tensor names, dtypes, shapes and the byte counts they imply.
#ifndef STAGGER_FORMAT_NAMES_H_
#define STAGGER_FORMAT_NAMES_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "stagger/status.h"

namespace stagger::format {

inline constexpr size_t kMaxNameLength = 128;
inline constexpr size_t kMaxRank = 16;                   // dimensions
inline constexpr uint64_t kMaxTensorBytes = 1ull << 40;  // 1 TiB

// OK when `name` matches [A-Za-z0-9._-]{1,128} and is not "." or ".."
// (names become directory names on servers); INVALID_ARGUMENT naming the
// `what` ("job", "tensor") and the offending text otherwise.
Status ValidateName(std::string_view what, std::string_view name);

// Element size in bytes of a dtype ("F32", "BF16", ... as safetensors names
// them); INVALID_ARGUMENT for an unknown dtype.
Result<size_t> DtypeSize(std::string_view dtype);

// Element size of a floating-point dtype (F64, F32, F16, BF16: where the
// float codecs apply), else 0 (integers, bools, unknown names).
int FloatElementSize(std::string_view dtype);

// Number of bytes a tensor of `dtype` and `shape` holds; INVALID_ARGUMENT on
// a negative dimension, too many dimensions or more than kMaxTensorBytes.
Result<uint64_t> TensorBytes(std::string_view dtype,
                             const std::vector<int64_t>& shape);

// Checks that this rank's slice (shape at global_offset) lies inside
// global_shape. Empty global_shape means "not sharded" and is OK.
Status ValidateSlice(const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& global_shape,
                     const std::vector<int64_t>& global_offset);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_NAMES_H_
