// safetensors export: builds the header of a .safetensors file (8-byte
// little-endian header length, then a JSON object, padded with spaces to a
// multiple of 8). Tensor bytes follow the header, in the order given.
// No I/O here: the caller writes the header and then the bytes.
#ifndef STAGGER_FORMAT_SAFETENSORS_H_
#define STAGGER_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stagger/status.h"

namespace stagger::format {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors dtype names: "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
};

// Returns the header bytes (length prefix + JSON). INVALID_ARGUMENT when a
// name repeats or a byte size does not match dtype and shape.
Result<std::string> SafetensorsHeader(
    const std::vector<SafetensorsEntry>& tensors,
    const std::map<std::string, std::string>& metadata);

}  // namespace stagger::format

#endif  // STAGGER_FORMAT_SAFETENSORS_H_
