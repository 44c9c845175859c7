#include "server/control_service.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "format/names.h"
#include "format/record.h"

namespace stagger::server {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

ControlService::ControlService(MetaStore* meta, std::string data_address,
                               std::string server_id, RetentionPolicy retention)
    : meta_(meta),
      data_address_(std::move(data_address)),
      server_id_(std::move(server_id)),
      retention_(retention) {}

grpc::Status ControlService::Hello(grpc::ServerContext*,
                                   const pb::HelloRequest*,
                                   pb::HelloReply* reply) {
  reply->set_data_address(data_address_);
  reply->set_format_version(format::kFormatVersion);
  reply->set_server_id(server_id_);
  return grpc::Status::OK;
}

grpc::Status ControlService::CommitShard(grpc::ServerContext*,
                                         const pb::CommitShardRequest* req,
                                         pb::CommitShardReply* reply) {
  auto info = meta_->CommitShard(req->manifest());
  if (!info.ok()) {
    return ToGrpc(WithContext(
        info.status(), absl::StrCat("commit of job '", req->manifest().job(),
                                    "' step ", req->manifest().step(), " rank ",
                                    req->manifest().rank())));
  }
  *reply->mutable_step() = *info;
  if (info->complete() && retention_.keep_last > 0) {
    auto gc = meta_->Gc(req->manifest().job(), retention_.keep_last,
                        retention_.grace_ms);
    if (!gc.ok()) {
      fprintf(stderr, "stagger-server: retention gc of job '%s': %s\n",
              req->manifest().job().c_str(),
              std::string(gc.status().message()).c_str());
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::GetStep(grpc::ServerContext*,
                                     const pb::GetStepRequest* req,
                                     pb::GetStepReply* reply) {
  Status valid = format::ValidateName("job", req->job());
  if (!valid.ok()) return ToGrpc(valid);
  auto info = req->latest() ? meta_->LatestComplete(req->job())
                            : meta_->GetStep(req->job(), req->step());
  if (!info.ok()) return ToGrpc(info.status());
  std::vector<uint32_t> ranks;
  if (req->all_ranks()) {
    ranks.assign(info->committed_ranks().begin(),
                 info->committed_ranks().end());
  } else {
    ranks.assign(req->ranks().begin(), req->ranks().end());
  }
  for (uint32_t r : ranks) {
    if (r >= info->world_size()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " out of range for world size ", info->world_size())));
    }
    auto shard = meta_->GetShard(req->job(), info->step(), r);
    if (!shard.ok()) return ToGrpc(shard.status());
    *reply->add_shards() = std::move(*shard);
  }
  *reply->mutable_step() = *info;
  return grpc::Status::OK;
}

grpc::Status ControlService::ListSteps(grpc::ServerContext*,
                                       const pb::ListStepsRequest* req,
                                       pb::ListStepsReply* reply) {
  Status valid = format::ValidateName("job", req->job());
  if (!valid.ok()) return ToGrpc(valid);
  auto steps = meta_->ListSteps(req->job(), req->include_partial());
  if (!steps.ok()) return ToGrpc(steps.status());
  for (auto& s : *steps) *reply->add_steps() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status ControlService::Gc(grpc::ServerContext*, const pb::GcRequest* req,
                                pb::GcReply* reply) {
  if (req->grace_ms() < 0) {
    return ToGrpc(absl::InvalidArgumentError("grace must be >= 0"));
  }
  auto r = meta_->Gc(req->job(), req->keep(), req->grace_ms());
  if (!r.ok()) return ToGrpc(r.status());
  for (int64_t s : r->steps_deleted) reply->add_steps_deleted(s);
  reply->set_steps_kept(r->steps_kept);
  reply->set_chunks_deleted(r->chunks_deleted);
  reply->set_bytes_freed(r->bytes_freed);
  return grpc::Status::OK;
}

}  // namespace stagger::server
