// The names of CheckpointerOptions' enumerated options, in one place for the
// Python binding, the CLI and the benchmarks.
#include "stagger/options.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger {
namespace {

template <typename E, size_t N>
using Names = std::array<std::pair<E, std::string_view>, N>;

constexpr Names<CodecChoice, 4> kCodecs = {{
    {CodecChoice::kAuto, "auto"},
    {CodecChoice::kZstd, "zstd"},
    {CodecChoice::kByteGroupZstd, "bytegroup+zstd"},
    {CodecChoice::kRaw, "raw"},
}};
constexpr Names<SnapshotOverlap, 3> kOverlaps = {{
    {SnapshotOverlap::kAuto, "auto"},
    {SnapshotOverlap::kOn, "on"},
    {SnapshotOverlap::kOff, "off"},
}};
constexpr Names<QosYield, 3> kYields = {{
    {QosYield::kOff, "off"},
    {QosYield::kPause, "pause"},
    {QosYield::kLearn, "learn"},
}};
constexpr Names<Durability, 3> kDurabilities = {{
    {Durability::kDefault, "default"},
    {Durability::kDisk, "disk"},
    {Durability::kMemory, "memory"},
}};
constexpr Names<BackgroundCpu, 2> kBackgroundCpus = {{
    {BackgroundCpu::kIdle, "idle"},
    {BackgroundCpu::kNormal, "normal"},
}};

template <typename E, size_t N>
Result<E> Parse(const Names<E, N>& names, std::string_view option,
                std::string_view name) {
  std::string known;
  for (const auto& [value, n] : names) {
    if (n == name) return value;
    absl::StrAppend(&known, known.empty() ? "" : ", ", AsAbsl(n));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      AsAbsl(option), " '", AsAbsl(name), "' unknown (", known, ")"));
}

template <typename E, size_t N>
std::string_view Name(const Names<E, N>& names, E value) {
  for (const auto& [v, n] : names) {
    if (v == value) return n;
  }
  return "?";
}

}  // namespace

Result<CodecChoice> ParseCodecChoice(std::string_view name) {
  return Parse(kCodecs, "codec", name);
}
Result<SnapshotOverlap> ParseSnapshotOverlap(std::string_view name) {
  return Parse(kOverlaps, "snapshot_overlap", name);
}
Result<QosYield> ParseQosYield(std::string_view name) {
  return Parse(kYields, "qos_yield", name);
}
std::string_view NameOf(CodecChoice c) { return Name(kCodecs, c); }
std::string_view NameOf(SnapshotOverlap s) { return Name(kOverlaps, s); }
std::string_view NameOf(QosYield y) { return Name(kYields, y); }
Result<Durability> ParseDurability(std::string_view name) {
  return Parse(kDurabilities, "durability", name);
}
std::string_view NameOf(Durability d) { return Name(kDurabilities, d); }
Result<BackgroundCpu> ParseBackgroundCpu(std::string_view name) {
  return Parse(kBackgroundCpus, "background_cpu", name);
}
std::string_view NameOf(BackgroundCpu b) { return Name(kBackgroundCpus, b); }

}  // namespace stagger
