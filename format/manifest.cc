#include "format/manifest.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "format/names.h"
#include "format/record.h"

namespace stagger::format {
namespace {

Status ValidateTensor(const pb::TensorEntry& t) {
  STAGGER_RETURN_IF_ERROR(ValidateName("tensor", t.name()));
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  std::vector<int64_t> gshape(t.global_shape().begin(), t.global_shape().end());
  std::vector<int64_t> goff(t.global_offset().begin(), t.global_offset().end());
  STAGGER_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(t.dtype(), shape));
  if (bytes != t.byte_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size ", t.byte_size(), " does not match dtype ",
                     t.dtype(), " and shape (", bytes, " bytes)"));
  }
  STAGGER_RETURN_IF_ERROR(ValidateSlice(shape, gshape, goff));
  uint64_t covered = 0;
  for (const pb::ChunkRef& c : t.chunks()) {
    if (c.id().size() != 16) {
      return absl::InvalidArgumentError("chunk id must be 16 bytes");
    }
    if (!c.base_id().empty() && c.base_id().size() != 16) {
      return absl::InvalidArgumentError("delta base id must be 16 bytes");
    }
    if (c.codec() > 255 || !IsKnownCodec(static_cast<uint8_t>(c.codec()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown codec ", c.codec()));
    }
    if (c.raw_length() == 0 || c.raw_length() > kMaxChunkRawBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk raw length ", c.raw_length(), " out of range"));
    }
    covered += c.raw_length();
    if (covered > t.byte_size()) break;
  }
  if (covered != t.byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunks cover ", covered, " bytes, tensor has ", t.byte_size()));
  }
  return absl::OkStatus();
}

}  // namespace

Status ValidateShardManifest(const pb::ShardManifest& m) {
  STAGGER_RETURN_IF_ERROR(ValidateName("job", m.job()));
  if (m.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must be >= 0, got ", m.step()));
  }
  if (m.world_size() == 0 || m.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", m.world_size(), " out of range [1, ",
                     kMaxWorldSize, "]"));
  }
  if (m.replicas() > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas ", m.replicas(), " out of range [0, 16]"));
  }
  if (m.rank() >= m.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", m.rank(), " must be < world size ", m.world_size()));
  }
  if (m.chunk_size() == 0 || m.chunk_size() > kMaxChunkSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size ", m.chunk_size(), " out of range"));
  }
  if (static_cast<size_t>(m.tensors_size()) > kMaxTensorsPerShard) {
    return absl::InvalidArgumentError("too many tensors in one shard");
  }
  std::set<std::string> names;
  for (const pb::TensorEntry& t : m.tensors()) {
    if (!names.insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name(), "' appears twice"));
    }
    Status s = ValidateTensor(t);
    if (!s.ok()) return WithContext(s, absl::StrCat("tensor '", t.name(), "'"));
  }
  return absl::OkStatus();
}

std::string MissingRanks(const pb::StepInfo& step, size_t named) {
  std::vector<bool> committed(step.world_size(), false);
  for (uint32_t r : step.committed_ranks()) {
    if (r < committed.size()) committed[r] = true;
  }
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < committed.size(); ++r) {
    if (!committed[r]) missing.push_back(r);
  }
  if (missing.empty()) return "";
  const size_t shown = std::min(missing.size(), named);
  std::string out = absl::StrCat(
      missing.size() == 1 ? "rank " : "ranks ",
      absl::StrJoin(missing.begin(),
                    missing.begin() + static_cast<std::ptrdiff_t>(shown),
                    ", "));
  if (missing.size() > shown) {
    absl::StrAppend(&out, " and ", missing.size() - shown, " more");
  }
  return out;
}

}  // namespace stagger::format
