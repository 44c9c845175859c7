// SliceIndex: where each tensor's slices are among a complete step's
// shards, so that a resharding load's GetStep (GetStepRequest::regions)
// returns the manifests that hold its slices, each with only those
// tensors, instead of every rank's manifest. Built from the step's shards
// on first use and kept for the last few steps asked (a step is
// immutable once complete; its creation time is part of the key, so a
// step deleted and saved again is indexed again).
//
// Memory: an entry per tensor per rank (its name shared, offset and
// shape), about the manifests without their chunk lists.
//
// Thread-safe.
#ifndef STAGGER_SERVER_SLICE_INDEX_H_
#define STAGGER_SERVER_SLICE_INDEX_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "format/manifest.pb.h"
#include "proto/stagger.pb.h"
#include "stagger/status.h"

namespace stagger::server {

class SliceIndex {
 public:
  explicit SliceIndex(size_t steps_kept = 4) : steps_kept_(steps_kept) {}

  using ReadShard = std::function<Result<pb::ShardManifest>(uint32_t rank)>;
  // Rank -> the names of its tensors that hold part of `regions` (a
  // tensor saved with a global shape whose slice intersects a region of
  // its name; one saved per rank, from `prefer_rank` or rank 0). `info`
  // is a complete step of `job`; `read` reads one of its shards.
  Result<std::map<uint32_t, std::set<std::string>>> Find(
      const std::string& job, const pb::StepInfo& info,
      const google::protobuf::RepeatedPtrField<pb::TensorRegion>& regions,
      uint32_t prefer_rank, const ReadShard& read);

  // Whether the boxes (offset, shape) overlap; boxes of different ranks
  // (dimension counts) are taken to overlap, a box with no element
  // overlaps nothing.
  static bool Overlap(const google::protobuf::RepeatedField<int64_t>& a_off,
                      const google::protobuf::RepeatedField<int64_t>& a_shape,
                      const google::protobuf::RepeatedField<int64_t>& b_off,
                      const google::protobuf::RepeatedField<int64_t>& b_shape);

 private:
  struct Entry {
    uint32_t rank;
    bool global;  // saved with a global shape (a slice, or replicated)
    google::protobuf::RepeatedField<int64_t> offset, shape;
  };
  struct Step {
    std::string key;
    std::map<std::string, std::vector<Entry>> by_name;
  };
  Result<std::shared_ptr<const Step>> Get(const std::string& key,
                                          const pb::StepInfo& info,
                                          const ReadShard& read);

  const size_t steps_kept_;
  absl::Mutex mu_;
  std::list<std::shared_ptr<const Step>> steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_SLICE_INDEX_H_
