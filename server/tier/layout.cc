#include "server/tier/layout.h"

#include <cstdint>

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

namespace {

// `digits` as a number, when it is all decimal digits and fits an int64.
std::optional<int64_t> Decimal(std::string_view digits) {
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

}  // namespace

std::optional<int64_t> StepOfObject(std::string_view name) {
  if (name.size() != kStepPrefix.size() + 20 ||
      name.substr(0, kStepPrefix.size()) != kStepPrefix) {
    return std::nullopt;
  }
  return Decimal(name.substr(kStepPrefix.size()));
}

std::optional<int64_t> StepOfManifest(std::string_view name) {
  constexpr std::string_view kPrefix = "manifest.";
  if (name.size() != kPrefix.size() + 20 + 1 + 10 ||
      name.substr(0, kPrefix.size()) != kPrefix ||
      name[kPrefix.size() + 20] != '.' ||
      !Decimal(name.substr(kPrefix.size() + 21))) {
    return std::nullopt;
  }
  return Decimal(name.substr(kPrefix.size(), 20));
}

std::optional<format::ChunkId> ChunkOfObject(std::string_view name) {
  constexpr std::string_view kPrefix = "chunk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  Result<format::ChunkId> id =
      format::ChunkId::FromHex(name.substr(kPrefix.size()));
  if (!id.ok()) return std::nullopt;
  return *id;
}

}  // namespace stagger::server::tier
