#include "server/slice_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stagger::server {

bool SliceIndex::Overlap(
    const google::protobuf::RepeatedField<int64_t>& a_off,
    const google::protobuf::RepeatedField<int64_t>& a_shape,
    const google::protobuf::RepeatedField<int64_t>& b_off,
    const google::protobuf::RepeatedField<int64_t>& b_shape) {
  if (a_shape.size() != b_shape.size()) return true;
  for (int d = 0; d < a_shape.size(); ++d) {
    const int64_t ao = d < a_off.size() ? a_off[d] : 0;
    const int64_t bo = d < b_off.size() ? b_off[d] : 0;
    if (std::max(ao, bo) >= std::min(ao + a_shape[d], bo + b_shape[d])) {
      return false;
    }
  }
  return true;
}

Result<std::shared_ptr<const SliceIndex::Step>> SliceIndex::Get(
    const std::string& key, const pb::StepInfo& info, const ReadShard& read) {
  absl::MutexLock l(&mu_);
  for (auto it = steps_.begin(); it != steps_.end(); ++it) {
    if ((*it)->key == key) {
      steps_.splice(steps_.begin(), steps_, it);  // most recent first
      return steps_.front();
    }
  }
  // Built under the lock: whoever asks for it meanwhile waits for it.
  auto step = std::make_shared<Step>();
  step->key = key;
  for (uint32_t rank : info.committed_ranks()) {
    STAGGER_ASSIGN_OR_RETURN(pb::ShardManifest m, read(rank));
    for (const pb::TensorEntry& t : m.tensors()) {
      Entry e{rank, t.global_shape_size() > 0, t.global_offset(), t.shape()};
      if (e.global && e.offset.empty()) e.offset.Resize(t.shape_size(), 0);
      step->by_name[t.name()].push_back(std::move(e));
    }
  }
  steps_.push_front(step);
  while (steps_.size() > steps_kept_) steps_.pop_back();
  return std::shared_ptr<const Step>(step);
}

Result<std::map<uint32_t, std::set<std::string>>> SliceIndex::Find(
    const std::string& job, const pb::StepInfo& info,
    const google::protobuf::RepeatedPtrField<pb::TensorRegion>& regions,
    uint32_t prefer_rank, const ReadShard& read) {
  if (!info.complete()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", info.step(), " of job '", job,
                     "' is not complete: its slices are not indexed"));
  }
  STAGGER_ASSIGN_OR_RETURN(
      std::shared_ptr<const Step> step,
      Get(absl::StrCat(job, "\n", info.step(), "\n", info.created_unix_ms()),
          info, read));
  std::map<uint32_t, std::set<std::string>> out;
  for (const pb::TensorRegion& r : regions) {
    auto it = step->by_name.find(r.name());
    if (it == step->by_name.end()) continue;
    for (const Entry& e : it->second) {
      const bool wanted =
          e.global ? Overlap(e.offset, e.shape, r.offset(), r.shape())
                   : e.rank == prefer_rank || e.rank == 0;
      if (wanted) out[e.rank].insert(r.name());
    }
  }
  return out;
}

}  // namespace stagger::server
