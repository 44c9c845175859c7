#include "server/tier/layout.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stagger::server::tier {

ObjectName ChunkObject(const std::string& job, const format::ChunkId& id) {
  return {job, absl::StrCat("chunk.", id.ToHex())};
}

ObjectName ManifestObject(const std::string& job, int64_t step, uint32_t rank) {
  return {job, absl::StrFormat("manifest.%020d.%010u", step, rank)};
}

std::string ManifestPrefix(int64_t step) {
  return absl::StrFormat("manifest.%020d.", step);
}

ObjectName StepObject(const std::string& job, int64_t step) {
  return {job, absl::StrFormat("step.%020d", step)};
}

std::optional<int64_t> StepOfObject(std::string_view name) {
  if (name.size() != kStepPrefix.size() + 20 ||
      name.substr(0, kStepPrefix.size()) != kStepPrefix) {
    return std::nullopt;
  }
  const std::string_view digits = name.substr(kStepPrefix.size());
  uint64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + static_cast<uint64_t>(c - '0');
    if (step > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  }
  return static_cast<int64_t>(step);
}

}  // namespace stagger::server::tier
