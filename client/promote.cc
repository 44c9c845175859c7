#include "client/promote.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/control.h"
#include "util/log.h"

namespace stagger::client {

Status PromoteShard(ServerSet& servers, size_t replicas,
                    const pb::ShardManifest& manifest, double flush_timeout_s) {
  // Every chunk the shard reads, delta bases too (a base from an earlier
  // memory-level save must be on disk as well).
  std::map<std::string, size_t> copies;
  for (const pb::TensorEntry& t : manifest.tensors()) {
    for (const pb::ChunkRef& c : t.chunks()) {
      copies.emplace(c.id(), 0);
      if (!c.base_id().empty()) copies.emplace(c.base_id(), 0);
    }
  }
  pb::FlushRequest req;
  req.set_job(manifest.job());
  for (const auto& [id, n] : copies) req.add_ids(id);
  const std::string what =
      absl::StrCat("step ", manifest.step(), " rank ", manifest.rank(),
                   " of job '", manifest.job(), "'");
  for (size_t i = 0; i < servers.size(); ++i) {
    ServerConn& server = servers.server(i);
    if (server.down) continue;
    pb::FlushReply reply;
    Status s =
        FromGrpc(CallUnlessBusy(server, flush_timeout_s,
                                [&](grpc::ClientContext* ctx) {
                                  return server.stub->Flush(ctx, req, &reply);
                                }),
                 absl::StrCat("flush on server ", server.address));
    if (IsServerGone(s)) {
      ServerSet::MarkDown(&server, s);
      continue;
    }
    if (!s.ok()) return WithContext(s, what);
    size_t k = 0;
    for (auto& [id, n] : copies) {
      const size_t byte = k / 8;
      if (byte < reply.on_disk().size() &&
          (static_cast<uint8_t>(reply.on_disk()[byte]) >> (k % 8)) & 1) {
        ++n;
      }
      ++k;
    }
  }
  size_t short_of = 0;
  for (const auto& [id, n] : copies) short_of += n < replicas ? 1 : 0;
  if (short_of > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " stays memory-level (degraded): ", short_of, " of its ",
        copies.size(), " chunks have fewer than ", replicas,
        " copies on the disks of the servers up (a server that held them "
        "in memory died or is down)"));
  }
  pb::ShardManifest on_disk = manifest;
  on_disk.set_in_memory(false);
  return CommitShard(servers, replicas, on_disk).status();
}

Promoter::Promoter(ServerSet* servers, size_t replicas, double flush_timeout_s)
    : servers_(servers),
      replicas_(replicas),
      flush_timeout_s_(flush_timeout_s) {}

void Promoter::Queue(pb::ShardManifest manifest) {
  {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  thread_.Submit([this, m = std::move(manifest)] {
    Status s = PromoteShard(*servers_, replicas_, m, flush_timeout_s_);
    if (!s.ok()) log::Warning("stagger", std::string(s.message()));
    absl::MutexLock lock(&mu_);
    --pending_;
    if (!s.ok() && error_.ok()) error_ = s;
  });
}

Status Promoter::WaitDisk(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int* n) { return *n == 0; }, &pending_),
                       timeout);
  if (!error_.ok()) return std::exchange(error_, Status());
  if (pending_ > 0) {
    return absl::DeadlineExceededError(
        absl::StrCat(pending_, " memory-level save(s) not yet known on disk"));
  }
  return absl::OkStatus();
}

}  // namespace stagger::client
