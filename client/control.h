// Control-plane calls the client and the CLI make, on top of ServerSet:
// each goes to the job's coordinator, with the set's deadline, and returns
// the server's status code and message unchanged (plus which server).
// Reads (GetStep, ListSteps) ask every server up and merge the answers
// (the newest complete step, the most ranks committed): a coordinator that
// was down while steps were committed holds fewer of them. A server that
// turns out gone (IsServerGone) is marked down.
#ifndef STAGGER_CLIENT_CONTROL_H_
#define STAGGER_CLIENT_CONTROL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/server_set.h"
#include "format/manifest.pb.h"
#include "proto/stagger.pb.h"

namespace stagger::client {

inline constexpr int64_t kLatest = -1;

// Step `step` (or the newest complete one for kLatest) with the manifests of
// `ranks`, or of every committed rank when `all_ranks`. Every manifest is
// validated before it is returned (DATA_LOSS otherwise).
Result<pb::GetStepReply> GetStep(ServerSet& servers, const std::string& job,
                                 int64_t step, bool all_ranks,
                                 const std::vector<uint32_t>& ranks);
// Complete step `step` with the manifests holding part of `regions`,
// each with only those tensors (GetStepRequest::regions; per-rank
// tensors from `prefer_rank`'s shard and rank 0's). A server that does not
// know regions answers with no manifest.
Result<pb::GetStepReply> GetSlices(ServerSet& servers, const std::string& job,
                                   int64_t step,
                                   const std::vector<pb::TensorRegion>& regions,
                                   uint32_t prefer_rank);

// Commits to the job's first `replicas` coordinators that are up (a gone
// one is replaced by the next in the ranking); UNAVAILABLE naming the
// servers down when fewer are left. Returns the first one's step.
Result<pb::StepInfo> CommitShard(ServerSet& servers, size_t replicas,
                                 const pb::ShardManifest& manifest);

// Where some server holds a step: on a disk, in its durable tier (a RADOS
// pool or an S3 bucket: "cold").
struct StepTiers {
  bool memory = false;  // memory-level: in servers' RAM, not known on disk
  bool disk = false;
  bool cold = false;
};

// The job's steps, merged over every server up; `disk_bytes` (optional)
// gets the bytes of the job's segment files summed over those servers, and
// `tiers` (optional) where any of them holds each step.
Result<std::vector<pb::StepInfo>> ListSteps(
    ServerSet& servers, const std::string& job, bool include_partial,
    uint64_t* disk_bytes = nullptr,
    std::map<int64_t, StepTiers>* tiers = nullptr);

// The jobs the servers that answer hold (those the token may touch), by
// name: steps as the best-informed server counts them, disk bytes summed.
// UNAVAILABLE when no server answers.
Result<std::vector<pb::JobInfo>> ListJobs(ServerSet& servers);

// Collects on every server of the set: the coordinator deletes the old
// steps and the chunks it holds that no kept step needs; with several
// servers, each other one then gets the coordinator's live chunk ids
// (LiveChunks) and drops the job's other chunks (Sweep). Each server
// compacts before replying (within the deadline). The reply sums the
// deletions and compactions of all servers; the first failing call's error
// otherwise (the servers before it have collected). `on_server_done`
// (optional) runs after each server has collected (progress reports).
// UNAVAILABLE, collecting nothing, while any server of the set is down.
Result<pb::GcReply> Gc(ServerSet& servers, const std::string& job,
                       uint32_t keep, int64_t grace_ms,
                       const std::function<void()>& on_server_done = nullptr,
                       bool keep_cold = false);

// As Gc, deleting the steps `steps` of `job` (every step with `all`)
// instead of the oldest: a chunk a remaining step uses, directly or as a
// delta base, stays. NOT_FOUND naming the steps the coordinator does not
// hold, with nothing deleted. The coordinator then deletes them from its
// durable tier too (GcReply::cold), unless `keep_cold`.
Result<pb::GcReply> DeleteSteps(
    ServerSet& servers, const std::string& job,
    const std::vector<int64_t>& steps, bool all, int64_t grace_ms,
    const std::function<void()>& on_server_done = nullptr,
    bool keep_cold = false);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CONTROL_H_
