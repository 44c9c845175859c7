#include "client/loader.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/control.h"
#include "format/names.h"

namespace stagger::client {
namespace {

using format::Box;

struct SavedEntry {
  const pb::ShardManifest* shard;
  const pb::TensorEntry* entry;
};

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ","), "]");
}

template <typename Field>
std::vector<int64_t> Vec(const Field& f) {
  return std::vector<int64_t>(f.begin(), f.end());
}

// The slice a (shape, global shape, global offset) description holds, and
// the global shape it is a slice of; a tensor without a global shape is the
// whole of itself.
Box SliceOf(const std::vector<int64_t>& shape,
            const std::vector<int64_t>& global_offset) {
  Box b;
  b.shape = shape;
  b.offset = global_offset.empty() ? std::vector<int64_t>(shape.size(), 0)
                                   : global_offset;
  return b;
}
std::vector<int64_t> GlobalOf(const std::vector<int64_t>& shape,
                              const std::vector<int64_t>& global_shape) {
  return global_shape.empty() ? shape : global_shape;
}

// The entry's chunks must be chunk_size bytes each but the last, so that a
// byte offset names its chunk.
Status CheckChunkLayout(const pb::ShardManifest& shard,
                        const pb::TensorEntry& e) {
  const uint64_t size = shard.chunk_size();
  uint64_t off = 0;
  for (int i = 0; i < e.chunks_size(); ++i) {
    const uint64_t want = std::min<uint64_t>(size, e.byte_size() - off);
    if (e.chunks(i).raw_length() != want) {
      return absl::DataLossError(
          absl::StrCat("tensor '", e.name(), "' of rank ", shard.rank(),
                       ": chunk ", i, " holds ", e.chunks(i).raw_length(),
                       " bytes, expected ", want, " (chunk size ", size, ")"));
    }
    off += want;
  }
  return absl::OkStatus();
}

// Parts asked for by range average at least this: each costs 16 bytes of
// request, and a server's copy.
constexpr uint64_t kMinPartBytes = 256;

// The parts of a chunk `runs` read, in increasing order, touching or
// overlapping ones merged.
std::vector<format::ChunkPart> PartsRead(
    const std::vector<format::CopyRun>& runs) {
  std::vector<format::ChunkPart> spans;
  for (const format::CopyRun& r : runs) spans.push_back({r.src, r.length});
  std::sort(spans.begin(), spans.end(),
            [](const format::ChunkPart& a, const format::ChunkPart& b) {
              return a.offset < b.offset;
            });
  std::vector<format::ChunkPart> out;
  for (const format::ChunkPart& s : spans) {
    if (!out.empty() && s.offset <= out.back().offset + out.back().length) {
      out.back().length =
          std::max(out.back().length, s.offset + s.length - out.back().offset);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

// Turns the chunk plan of one saved entry into fetches.
void AddFetches(const SavedEntry& saved, format::ChunkPlan chunks, char* dest,
                ServerSet& servers, LoadPlan* plan) {
  const pb::TensorEntry& e = *saved.entry;
  for (auto& [index, runs] : chunks) {
    const pb::ChunkRef& c = e.chunks(static_cast<int>(index));
    // Where the writer placed it; a copy on this node first.
    std::vector<ServerConn*> where =
        servers.LocalFirst(servers.ForSlot(saved.shard->rank(), e.name(), index,
                                           saved.shard->node()),
                           std::max<uint32_t>(1, saved.shard->replicas()));
    if (runs.size() == 1 && runs[0].src == 0 &&
        runs[0].length == c.raw_length()) {
      // The chunk is one contiguous piece of the destination.
      plan->items.push_back({&c, dest + runs[0].dst, std::move(where)});
      ++plan->chunks_direct;
      continue;
    }
    // The parts of the chunk the runs read: a server that serves ranges
    // sends only them (a reshard's slice boundary inside the chunk, or a
    // strided part of every row).
    std::vector<format::ChunkPart> parts = PartsRead(runs);
    plan->scatters.push_back(std::move(runs));
    FetchItem item{&c, dest, std::move(where), &plan->scatters.back()};
    uint64_t total = 0;
    for (const format::ChunkPart& p : parts) total += p.length;
    if (total < c.raw_length() && parts.size() <= format::kMaxRangeParts &&
        total >= kMinPartBytes * parts.size()) {
      item.parts = std::move(parts);
      ++plan->chunks_ranged;
    }
    plan->items.push_back(std::move(item));
    ++plan->chunks_scattered;
  }
}

std::string Describe(const std::string& dtype,
                     const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& global_shape) {
  return global_shape.empty()
             ? absl::StrCat(dtype, ShapeStr(shape))
             : absl::StrCat(dtype, ShapeStr(shape), " of global shape ",
                            ShapeStr(global_shape));
}

// INVALID_ARGUMENT: saved entry `s` does not describe target `t`.
Status Mismatch(const LoadTarget& t, const SavedEntry& s) {
  const pb::TensorEntry& e = *s.entry;
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor '", t.name, "' was saved by rank ", s.shard->rank(), " as ",
      Describe(e.dtype(), Vec(e.shape()), Vec(e.global_shape())),
      " but is registered as ", Describe(t.dtype, t.shape, t.global_shape)));
}

Status PlanLoadTensor(const LoadTarget& t, const std::vector<SavedEntry>& saved,
                      uint32_t prefer_rank, ServerSet& servers,
                      LoadPlan* plan) {
  STAGGER_ASSIGN_OR_RETURN(uint64_t element_size, format::DtypeSize(t.dtype));
  const std::vector<int64_t> global = GlobalOf(t.shape, t.global_shape);
  const Box wanted = SliceOf(t.shape, t.global_offset);
  const bool per_rank = t.global_shape.empty();
  // Entries that describe the same global tensor; other ranks' per-rank
  // tensors of another shape are not this rank's to load.
  std::vector<const SavedEntry*> usable;
  const SavedEntry* passed_over = nullptr;
  for (const SavedEntry& s : saved) {
    const pb::TensorEntry& e = *s.entry;
    if (e.dtype() == t.dtype &&
        GlobalOf(Vec(e.shape()), Vec(e.global_shape())) == global) {
      usable.push_back(&s);
    } else if (per_rank && e.global_shape_size() == 0) {
      if (passed_over == nullptr) passed_over = &s;
    } else {
      return Mismatch(t, s);
    }
  }
  std::vector<Box> uncovered;
  if (format::Elements(wanted) > 0) uncovered.push_back(wanted);
  for (const SavedEntry* s : usable) {
    if (uncovered.empty()) break;
    const Box have =
        SliceOf(Vec(s->entry->shape()), Vec(s->entry->global_offset()));
    format::ChunkPlan chunks;
    std::vector<Box> left;
    for (const Box& u : uncovered) {
      std::optional<Box> common = format::Intersect(u, have);
      if (!common) {
        left.push_back(u);
        continue;
      }
      format::AddRegionCopy(have, wanted, *common, element_size,
                            s->shard->chunk_size(), &chunks);
      for (Box& rest : format::Subtract(u, have)) {
        left.push_back(std::move(rest));
      }
    }
    uncovered = std::move(left);
    if (chunks.empty()) continue;
    STAGGER_RETURN_IF_ERROR(CheckChunkLayout(*s->shard, *s->entry));
    if (per_rank && s->shard->rank() != prefer_rank) {
      plan->from_other_ranks[t.name] = s->shard->rank();
    }
    AddFetches(*s, std::move(chunks), t.dest, servers, plan);
  }
  if (uncovered.empty()) return absl::OkStatus();
  if (passed_over != nullptr) return Mismatch(t, *passed_over);
  if (usable.empty()) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", t.name, "' is not in the step"));
  }
  std::vector<std::string> boxes;
  for (const Box& u : uncovered) boxes.push_back(format::BoxString(u));
  return absl::NotFoundError(absl::StrCat(
      "tensor '", t.name, "': region ", absl::StrJoin(boxes, " "),
      " of global shape ", ShapeStr(global), " is in no saved slice (",
      usable.size(), " rank(s) saved parts of it)"));
}

// The step's state alone (no manifests), complete or NOT_FOUND.
Result<pb::StepInfo> CompleteStepInfo(ServerSet& servers,
                                      const std::string& job, int64_t step) {
  STAGGER_ASSIGN_OR_RETURN(pb::GetStepReply reply,
                           GetStep(servers, job, step, false, {}));
  if (!reply.step().complete()) {
    return absl::NotFoundError(absl::StrCat(
        "step ", reply.step().step(), " of job '", job, "' is not complete (",
        reply.step().committed_ranks_size(), " of ", reply.step().world_size(),
        reply.step().world_size() == 1 ? " rank" : " ranks", " committed)"));
  }
  return reply.step();
}

// The part of its global tensor each target is.
std::vector<pb::TensorRegion> RegionsOf(
    const std::vector<LoadTarget>& targets) {
  std::vector<pb::TensorRegion> out;
  for (const LoadTarget& t : targets) {
    pb::TensorRegion& r = out.emplace_back();
    r.set_name(t.name);
    for (size_t d = 0; d < t.shape.size(); ++d) {
      r.add_offset(d < t.global_offset.size() ? t.global_offset[d] : 0);
      r.add_shape(t.shape[d]);
    }
  }
  return out;
}

std::vector<const pb::ShardManifest*> Pointers(const pb::GetStepReply& r) {
  std::vector<const pb::ShardManifest*> out;
  for (const pb::ShardManifest& m : r.shards()) out.push_back(&m);
  return out;
}

}  // namespace

bool IsReplicated(const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& global_shape) {
  return !global_shape.empty() && global_shape == shape;
}

Status PlanLoad(const std::vector<LoadTarget>& targets,
                const std::vector<const pb::ShardManifest*>& shards,
                uint32_t prefer_rank, ServerSet& servers, LoadPlan* plan) {
  std::vector<const pb::ShardManifest*> order = shards;
  std::stable_sort(
      order.begin(), order.end(),
      [prefer_rank](const pb::ShardManifest* a, const pb::ShardManifest* b) {
        return std::make_pair(a->rank() != prefer_rank, a->rank()) <
               std::make_pair(b->rank() != prefer_rank, b->rank());
      });
  std::map<std::string, std::vector<SavedEntry>> by_name;
  for (const pb::ShardManifest* m : order) {
    for (const pb::TensorEntry& e : m->tensors()) {
      by_name[e.name()].push_back({m, &e});
    }
  }
  static const std::vector<SavedEntry> kNone;
  for (const LoadTarget& t : targets) {
    auto it = by_name.find(t.name);
    STAGGER_RETURN_IF_ERROR(
        PlanLoadTensor(t, it == by_name.end() ? kNone : it->second, prefer_rank,
                       servers, plan));
  }
  return absl::OkStatus();
}

Result<int64_t> LoadStep(ServerSet& servers, ChunkIo& io,
                         const std::string& job, uint32_t rank,
                         uint32_t world_size, int64_t step,
                         const std::vector<LoadTarget>& targets,
                         const std::atomic<bool>* cancel,
                         LoadPlanning* planning) {
  const absl::Time start = absl::Now();
  LoadPlanning cost;
  auto read = [&cost](const pb::GetStepReply& r) {
    cost.manifest_bytes += r.ByteSizeLong();
    cost.manifests += static_cast<uint32_t>(r.shards_size());
  };
  STAGGER_ASSIGN_OR_RETURN(pb::StepInfo info,
                           CompleteStepInfo(servers, job, step));
  const int64_t number = info.step();
  const std::string what =
      absl::StrCat("load of job '", job, "' step ", number, " rank ", rank,
                   " of ", world_size, " (saved by ", info.world_size(),
                   info.world_size() == 1 ? " rank)" : " ranks)");
  // Manifests the plan points into: they outlive it.
  pb::GetStepReply reply;
  LoadPlan plan;
  Status planned = absl::NotFoundError("no shard read yet");
  if (info.world_size() == world_size) {
    // The usual case: this rank's own shard, plus rank 0's for the
    // replicated tensors, hold everything.
    std::vector<uint32_t> ranks = {rank};
    if (rank != 0) ranks.push_back(0);
    STAGGER_ASSIGN_OR_RETURN(reply,
                             GetStep(servers, job, number, false, ranks));
    read(reply);
    planned = PlanLoad(targets, Pointers(reply), rank, servers, &plan);
    if (!planned.ok() && !absl::IsNotFound(planned)) {
      return WithContext(planned, what);
    }
  }
  if (!planned.ok()) {
    // The manifests that hold this rank's slices (a resharding load, or
    // slices its own shard does not cover); every rank's only when those
    // do not plan (a server that does not index slices sends none).
    plan = LoadPlan();
    auto sliced = GetSlices(servers, job, number, RegionsOf(targets), rank);
    if (sliced.ok()) {
      reply = std::move(*sliced);
      read(reply);
      planned = PlanLoad(targets, Pointers(reply), rank, servers, &plan);
      if (!planned.ok() && !absl::IsNotFound(planned)) {
        return WithContext(planned, what);
      }
    }
  }
  if (!planned.ok()) {
    plan = LoadPlan();
    STAGGER_ASSIGN_OR_RETURN(reply, GetStep(servers, job, number, true, {}));
    read(reply);
    STAGGER_RETURN_IF_ERROR(WithContext(
        PlanLoad(targets, Pointers(reply), rank, servers, &plan), what));
  }
  cost.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  cost.from_other_ranks = plan.from_other_ranks;
  if (planning != nullptr) *planning = cost;
  STAGGER_RETURN_IF_ERROR(
      WithContext(io.Fetch(plan.items, nullptr, nullptr, cancel), what));
  return number;
}

}  // namespace stagger::client
