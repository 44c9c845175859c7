#include "client/save_plan.h"

#include <algorithm>
#include <utility>

#include "format/names.h"

namespace stagger::client {

bool AllRebase(const std::vector<ServerConn*>& servers) {
  if (servers.empty()) return false;
  for (const ServerConn* s : servers) {
    if (!s->rebases_deltas.load()) return false;
  }
  return true;
}

namespace {

// The manifest's header and one entry per tensor, chunk refs empty.
std::unique_ptr<pb::ShardManifest> Manifest(
    const SavePlanOptions& o, const std::vector<PlanTensor>& tensors) {
  auto m = std::make_unique<pb::ShardManifest>();
  m->set_job(o.job);
  m->set_step(o.step);
  m->set_rank(o.rank);
  m->set_world_size(o.world_size);
  m->set_replicas(o.replicas);
  m->set_node(o.node);
  m->set_chunk_size(o.chunk_size);
  m->set_created_unix_ms(o.created_unix_ms);
  for (const PlanTensor& t : tensors) {
    pb::TensorEntry* e = m->add_tensors();
    e->set_name(t.spec->name);
    e->set_dtype(t.spec->dtype);
    for (int64_t d : t.spec->shape) e->add_shape(d);
    for (int64_t d : t.spec->global_shape) e->add_global_shape(d);
    for (int64_t d : t.spec->global_offset) e->add_global_offset(d);
    e->set_byte_size(t.bytes);
    for (uint64_t off = 0; off < t.bytes; off += o.chunk_size) {
      e->add_chunks();
    }
  }
  return m;
}

// Chunk `i` of `t`'s link to its previous version.
void LinkPrevious(const SavePlanOptions& o, const PreviousChunks& prev,
                  size_t i, SaveChunk* c) {
  if (i >= prev.ids.size()) return;
  c->previous = prev.ids[i];
  if (i < prev.fingerprints.size()) {
    c->previous_fingerprint = prev.fingerprints[i];
  }
  c->previous_at_home = i < prev.at_home.size() && prev.at_home[i];
  const bool held = i < prev.versions.size() && prev.versions[i];
  // A server that rebases keeps the newest version whole: no cut.
  if (o.deltas_on && held &&
      (prev.depth[i] < o.delta_chain_max || AllRebase(c->servers))) {
    c->previous_bytes = prev.versions[i];
  }
  c->base_not_held = o.deltas_on && !held;
}

}  // namespace

SavePlan PlanSave(const SavePlanOptions& o, std::vector<PlanTensor> tensors) {
  SavePlan plan;
  plan.manifest = Manifest(o, tensors);
  // The previous version of each chunk, kept as its delta base, goes to
  // the chunks in tensor order, the same ones every save.
  uint64_t keep_left = o.deltas_on ? o.keep_budget : 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const PlanTensor& tensor = tensors[t];
    plan.state_bytes += tensor.bytes;
    plan.tensor_bytes.push_back(tensor.bytes);
    pb::TensorEntry* e = plan.manifest->mutable_tensors(static_cast<int>(t));
    const char* base = static_cast<const char*>(tensor.spec->data);
    const int element_size = format::FloatElementSize(tensor.spec->dtype);
    size_t i = 0;
    for (uint64_t off = 0; off < tensor.bytes; off += o.chunk_size, ++i) {
      const size_t len = std::min<uint64_t>(o.chunk_size, tensor.bytes - off);
      SaveChunk c{base + off,
                  len,
                  tensor.source,
                  e->mutable_chunks(static_cast<int>(i)),
                  o.slot_servers(tensor.spec->name, i),
                  element_size,
                  std::nullopt,
                  nullptr};
      c.fingerprint_in_place = tensor.spec->device == Device::kCuda;
      LinkPrevious(o, tensor.previous, i, &c);
      c.keep_bytes = len <= keep_left;
      if (c.keep_bytes) keep_left -= len;
      plan.chunks.push_back(std::move(c));
    }
  }
  return plan;
}

void RememberOutcomes(const pb::ShardManifest& m,
                      const std::vector<ChunkOutcome>& outcomes,
                      std::map<std::string, PreviousChunks>* history) {
  size_t k = 0;  // index into outcomes, across tensors in manifest order
  for (const pb::TensorEntry& t : m.tensors()) {
    // The manifest is this client's own, so its ids are well formed; were
    // one not, the tensor's history is forgotten (its next save sends
    // whole chunks) rather than trusted.
    std::vector<format::ChunkId> ids;
    for (const pb::ChunkRef& c : t.chunks()) {
      auto id = format::ChunkId::FromBytes(c.id());
      if (!id.ok()) break;
      ids.push_back(*id);
    }
    if (ids.size() != static_cast<size_t>(t.chunks_size())) {
      history->erase(t.name());
      k += t.chunks_size();
      continue;
    }
    PreviousChunks& p = (*history)[t.name()];
    const bool same_layout =
        p.bytes == t.byte_size() && p.chunk_size == m.chunk_size() &&
        p.ids.size() == static_cast<size_t>(t.chunks_size());
    p.bytes = t.byte_size();
    p.chunk_size = m.chunk_size();
    p.ids.resize(t.chunks_size());
    p.versions.resize(t.chunks_size());
    p.depth.resize(t.chunks_size(), 0);
    p.fingerprints.resize(t.chunks_size());
    p.at_home.resize(t.chunks_size(), false);
    for (int i = 0; i < t.chunks_size(); ++i, ++k) {
      p.ids[i] = ids[i];
      const ChunkOutcome& o = outcomes[k];
      p.fingerprints[i] = o.fingerprint;
      p.at_home[i] = o.at_home;
      if (o.unchanged && same_layout) continue;  // version and depth stay
      p.versions[i] = o.bytes;
      p.depth[i] = o.delta && same_layout ? p.depth[i] + 1 : 0;
    }
  }
}

}  // namespace stagger::client
