#include "client/control.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "format/manifest.h"

namespace stagger::client {
namespace {

void SetDeadline(grpc::ClientContext* ctx, double timeout_s) {
  ctx->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
}

}  // namespace

Result<pb::GetStepReply> GetStep(ServerSet& servers, const std::string& job,
                                 int64_t step, bool all_ranks,
                                 const std::vector<uint32_t>& ranks) {
  ServerConn& coord = servers.Coordinator(job);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, servers.timeout_s());
  pb::GetStepRequest req;
  req.set_job(job);
  req.set_latest(step == kLatest);
  req.set_step(step == kLatest ? 0 : step);
  req.set_all_ranks(all_ranks);
  for (uint32_t r : ranks) req.add_ranks(r);
  pb::GetStepReply reply;
  STAGGER_RETURN_IF_ERROR(FromGrpc(coord.stub->GetStep(&ctx, req, &reply),
                                   absl::StrCat("server ", coord.address)));
  for (const pb::ShardManifest& m : reply.shards()) {
    Status s = format::ValidateShardManifest(m);
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("server ", coord.address, " sent a bad manifest for ",
                       "rank ", m.rank(), ": ", s.message()));
    }
  }
  return reply;
}

Result<pb::StepInfo> CommitShard(ServerSet& servers,
                                 const pb::ShardManifest& manifest) {
  ServerConn& coord = servers.Coordinator(manifest.job());
  grpc::ClientContext ctx;
  SetDeadline(&ctx, servers.timeout_s());
  pb::CommitShardRequest req;
  *req.mutable_manifest() = manifest;
  pb::CommitShardReply reply;
  STAGGER_RETURN_IF_ERROR(FromGrpc(coord.stub->CommitShard(&ctx, req, &reply),
                                   absl::StrCat("server ", coord.address)));
  return reply.step();
}

Result<std::vector<pb::StepInfo>> ListSteps(ServerSet& servers,
                                            const std::string& job,
                                            bool include_partial) {
  ServerConn& coord = servers.Coordinator(job);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, servers.timeout_s());
  pb::ListStepsRequest req;
  req.set_job(job);
  req.set_include_partial(include_partial);
  pb::ListStepsReply reply;
  STAGGER_RETURN_IF_ERROR(FromGrpc(coord.stub->ListSteps(&ctx, req, &reply),
                                   absl::StrCat("server ", coord.address)));
  return std::vector<pb::StepInfo>(reply.steps().begin(), reply.steps().end());
}

Result<pb::GcReply> Gc(ServerSet& servers, const std::string& job,
                       uint32_t keep, int64_t grace_ms) {
  pb::GcReply reply;
  // The coordinator holds the job's steps and decides what is live. Chunks
  // placed on other servers are not collected yet (see client/README.md).
  pb::GcRequest req;
  req.set_job(job);
  req.set_keep(keep);
  req.set_grace_ms(grace_ms);
  ServerConn& coord = servers.Coordinator(job);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, servers.timeout_s());
  STAGGER_RETURN_IF_ERROR(FromGrpc(coord.stub->Gc(&ctx, req, &reply),
                                   absl::StrCat("server ", coord.address)));
  return reply;
}

}  // namespace stagger::client
