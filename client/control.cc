#include "client/control.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/manifest.h"

namespace stagger::client {
namespace {

// Live ids per Sweep message; the server takes at most 65536.
constexpr size_t kSweepIdsPerMessage = 1 << 15;

Result<std::vector<std::string>> FetchLiveChunks(ServerConn& coord,
                                                 const std::string& job,
                                                 double timeout_s) {
  grpc::ClientContext ctx;
  PrepareCall(coord, &ctx, timeout_s);
  pb::LiveChunksRequest req;
  req.set_job(job);
  auto reader = coord.stub->LiveChunks(&ctx, req);
  std::vector<std::string> ids;
  size_t bad = 0;
  pb::LiveChunksReply batch;
  while (reader->Read(&batch)) {
    for (std::string& id : *batch.mutable_ids()) {
      if (id.size() != 16) ++bad;
      ids.push_back(std::move(id));
    }
  }
  STAGGER_RETURN_IF_ERROR(
      FromGrpc(reader->Finish(),
               absl::StrCat("live chunks from server ", coord.address)));
  if (bad > 0) {
    return absl::DataLossError(absl::StrCat("server ", coord.address, " sent ",
                                            bad, " live ids not 16 bytes"));
  }
  return ids;
}

Result<pb::SweepReply> Sweep(ServerConn& server, const std::string& job,
                             const std::vector<std::string>& live,
                             int64_t grace_ms, double timeout_s) {
  grpc::ClientContext ctx;
  PrepareCall(server, &ctx, timeout_s);
  pb::SweepReply reply;
  auto writer = server.stub->Sweep(&ctx, &reply);
  pb::SweepRequest msg;
  msg.set_job(job);
  msg.set_grace_ms(grace_ms);
  msg.set_wait_for_compaction(true);
  size_t next = 0;
  while (true) {
    for (size_t n = 0; n < kSweepIdsPerMessage && next < live.size(); ++n) {
      msg.add_live_ids(live[next++]);
    }
    if (next == live.size()) {
      msg.set_last(true);
      msg.set_total_ids(live.size());
    }
    // A refused write means the server ended the call: Finish says why.
    if (!writer->Write(msg) || msg.last()) break;
    msg.Clear();
  }
  writer->WritesDone();
  STAGGER_RETURN_IF_ERROR(FromGrpc(
      writer->Finish(), absl::StrCat("sweep on server ", server.address)));
  return reply;
}

void AddCompaction(const pb::CompactionReport& from, const std::string& server,
                   pb::CompactionReport* to) {
  to->set_segments_removed(to->segments_removed() + from.segments_removed());
  to->set_bytes_copied(to->bytes_copied() + from.bytes_copied());
  to->set_bytes_reclaimed(to->bytes_reclaimed() + from.bytes_reclaimed());
  to->set_pending(to->pending() || from.pending());
  if (to->error().empty() && !from.error().empty()) {
    to->set_error(absl::StrCat("server ", server, ": ", from.error()));
  }
}

// One unary call to `to` with the set's deadline and token, repeated
// while the server is busy; an error names the server. `rpc` issues the
// call on the context it is given.
template <typename Rpc>
Status Unary(const ServerSet& servers, const ServerConn& to, Rpc rpc) {
  return FromGrpc(CallUnlessBusy(to, servers.timeout_s(), rpc),
                  absl::StrCat("server ", to.address));
}

// Runs `call` on every server up, in the job's ranking order (a gone one
// is marked down and skipped). A coordinator that was down while steps
// were committed holds fewer of them, and which servers coordinated a
// step depends on which were up then: the answers are merged by the
// caller. Returns OK when one server answered OK; else the first error
// other than NOT_FOUND, else the first server's NOT_FOUND.
template <typename Call>
Status OnEveryServer(ServerSet& servers, const std::string& job, Call call) {
  Status not_found, other;
  bool any = false;
  // A server that restarted since the last call is dialled afresh (loads
  // fetch over the data connection right after this).
  servers.NoteBrokenConnections();
  if (servers.up() == 0) {
    // Before "no server is up": one probe of each (a restarted server is
    // back at once; the error below names the rest).
    servers.AwaitUp(1, absl::ZeroDuration()).IgnoreError();
  }
  for (ServerConn* s : servers.Coordinators(job)) {
    if (s->down) continue;
    Status st = call(*s);
    if (IsServerGone(st)) {
      ServerSet::MarkDown(s, st);
      if (other.ok()) other = st;
      continue;
    }
    if (st.ok()) {
      any = true;
    } else if (absl::IsNotFound(st)) {
      if (not_found.ok()) not_found = st;
    } else if (other.ok()) {
      other = st;
    }
  }
  if (any) return absl::OkStatus();
  if (!other.ok()) return other;
  if (!not_found.ok()) return not_found;
  return absl::UnavailableError(
      absl::StrCat("no server is up; down: ", servers.DownList()));
}

// Whether step reply `a` says more than `b` about the same request: a newer
// complete step, or the same step with more ranks committed.
bool Better(const pb::GetStepReply& a, const pb::GetStepReply& b) {
  if (a.step().complete() != b.step().complete()) return a.step().complete();
  if (a.step().step() != b.step().step()) {
    return a.step().step() > b.step().step();
  }
  if (a.step().committed_ranks_size() != b.step().committed_ranks_size()) {
    return a.step().committed_ranks_size() > b.step().committed_ranks_size();
  }
  // A coordinator that saw a rank made disk-level knows more.
  return a.step().memory_ranks_size() < b.step().memory_ranks_size();
}

}  // namespace

namespace {

// GetStep with `req` on every server up, the best answer kept, its
// manifests checked.
Result<pb::GetStepReply> AskEveryServer(ServerSet& servers,
                                        const std::string& job,
                                        const pb::GetStepRequest& req) {
  pb::GetStepReply reply;
  std::string from;
  bool have = false;
  STAGGER_RETURN_IF_ERROR(OnEveryServer(servers, job, [&](ServerConn& coord) {
    pb::GetStepReply r;
    Status s = Unary(servers, coord, [&](grpc::ClientContext* ctx) {
      return coord.stub->GetStep(ctx, req, &r);
    });
    if (s.ok() && (!have || Better(r, reply))) {
      reply = std::move(r);
      from = coord.address;
      have = true;
    }
    return s;
  }));
  for (const pb::ShardManifest& m : reply.shards()) {
    Status s = format::ValidateShardManifest(m);
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("server ", from, " sent a bad manifest for ", "rank ",
                       m.rank(), ": ", s.message()));
    }
  }
  return reply;
}

}  // namespace

Result<pb::GetStepReply> GetStep(ServerSet& servers, const std::string& job,
                                 int64_t step, bool all_ranks,
                                 const std::vector<uint32_t>& ranks) {
  pb::GetStepRequest req;
  req.set_job(job);
  req.set_latest(step == kLatest);
  req.set_step(step == kLatest ? 0 : step);
  req.set_all_ranks(all_ranks);
  for (uint32_t r : ranks) req.add_ranks(r);
  return AskEveryServer(servers, job, req);
}

Result<pb::GetStepReply> GetSlices(ServerSet& servers, const std::string& job,
                                   int64_t step,
                                   const std::vector<pb::TensorRegion>& regions,
                                   uint32_t prefer_rank) {
  pb::GetStepRequest req;
  req.set_job(job);
  req.set_step(step);
  for (const pb::TensorRegion& r : regions) *req.add_regions() = r;
  req.set_prefer_rank(prefer_rank);
  return AskEveryServer(servers, job, req);
}

Result<pb::StepInfo> CommitShard(ServerSet& servers, size_t replicas,
                                 const pb::ShardManifest& manifest) {
  pb::CommitShardRequest req;
  *req.mutable_manifest() = manifest;
  req.set_chunks_elsewhere(servers.size() > 1);
  if (manifest.in_memory()) {
    // The coordinators confirm its copies on disk themselves
    // (server/promoter.h): where they are and how many it needs. An
    // embedded server has no address another can reach.
    for (size_t i = 0; i < servers.size(); ++i) {
      const std::string& a = servers.server(i).address;
      if (absl::StartsWith(a, "embedded:")) {
        req.clear_copy_servers();
        break;
      }
      req.add_copy_servers(a);
    }
    req.set_replicas(static_cast<uint32_t>(replicas));
  }
  std::optional<pb::StepInfo> first;
  std::vector<ServerConn*> committed_to;
  size_t committed = 0;
  for (int pass = 0; pass < 2 && committed < replicas; ++pass) {
    if (pass == 1) {
      // Too few coordinators answered. A server that restarted in the
      // middle of the commit may have committed and lost its reply: wait
      // for the servers (server_wait) and commit again. Commits are
      // idempotent: one that went through answers with the same step.
      if (servers.wait() <= absl::ZeroDuration() ||
          !servers.AwaitUp(replicas, servers.wait()).ok()) {
        break;
      }
    }
    for (ServerConn* coord : servers.Coordinators(manifest.job())) {
      if (committed == replicas) break;
      if (coord->down || std::find(committed_to.begin(), committed_to.end(),
                                   coord) != committed_to.end()) {
        continue;
      }
      pb::CommitShardReply reply;
      Status s = Unary(servers, *coord, [&](grpc::ClientContext* ctx) {
        return coord->stub->CommitShard(ctx, req, &reply);
      });
      if (IsServerGone(s)) {
        ServerSet::MarkDown(coord, s);
        continue;
      }
      STAGGER_RETURN_IF_ERROR(s);
      if (!first) first = reply.step();
      committed_to.push_back(coord);
      ++committed;
    }
  }
  if (committed < replicas) {
    return absl::UnavailableError(absl::StrCat(
        "commit of job '", manifest.job(), "' step ", manifest.step(), " rank ",
        manifest.rank(), " reached ", committed, " of ", replicas,
        " coordinators; servers down: ", servers.DownList()));
  }
  return *first;
}

Result<std::vector<pb::StepInfo>> ListSteps(
    ServerSet& servers, const std::string& job, bool include_partial,
    uint64_t* disk_bytes, std::map<int64_t, StepTiers>* tiers) {
  if (disk_bytes != nullptr) *disk_bytes = 0;
  if (tiers != nullptr) tiers->clear();
  pb::ListStepsRequest req;
  req.set_job(job);
  req.set_include_partial(include_partial);
  // Per step, what the best-informed server says of it.
  std::map<int64_t, pb::StepInfo> merged;
  STAGGER_RETURN_IF_ERROR(OnEveryServer(servers, job, [&](ServerConn& coord) {
    pb::ListStepsReply reply;
    Status s = Unary(servers, coord, [&](grpc::ClientContext* ctx) {
      return coord.stub->ListSteps(ctx, req, &reply);
    });
    if (s.ok() && disk_bytes != nullptr) *disk_bytes += reply.job_disk_bytes();
    for (int i = 0;
         tiers != nullptr && i < reply.tiers_size() && i < reply.steps_size();
         ++i) {
      StepTiers& t = (*tiers)[reply.steps(i).step()];
      t.memory |= reply.tiers(i).memory();
      t.disk |= reply.tiers(i).disk();
      t.cold |= reply.tiers(i).rados();
    }
    for (const pb::StepInfo& info : reply.steps()) {
      auto [it, inserted] = merged.try_emplace(info.step(), info);
      if (inserted) continue;
      pb::GetStepReply a, b;
      *a.mutable_step() = info;
      *b.mutable_step() = it->second;
      if (Better(a, b)) it->second = info;
    }
    return s;
  }));
  std::vector<pb::StepInfo> out;
  for (auto& [step, info] : merged) out.push_back(std::move(info));
  return out;
}

namespace {

void AddGraceKept(const pb::GraceKept& from, pb::GraceKept* to) {
  to->set_chunks(to->chunks() + from.chunks());
  to->set_bytes(to->bytes() + from.bytes());
  to->set_until_unix_ms(std::max(to->until_unix_ms(), from.until_unix_ms()));
}

// Collecting is destructive: it trusts the coordinator's manifests to say
// what is live, and a server standing in for a coordinator that is down
// may hold none of them.
Status NeedEveryServer(const ServerSet& servers, const std::string& what) {
  if (servers.up() < servers.size()) {
    return absl::UnavailableError(
        absl::StrCat(what, " needs every server up; down: ", servers.DownList(),
                     "; nothing was collected"));
  }
  return absl::OkStatus();
}

// After the coordinator `coord` collected: the other servers hold chunks
// only, and each drops the job's chunks outside the coordinator's live set,
// adding to `reply`. With `none_live` (every step was deleted) nothing is
// live; else the coordinator must hold a step.
Status SweepTheOthers(ServerSet& servers, ServerConn& coord,
                      const std::string& job, int64_t grace_ms, bool none_live,
                      const std::function<void()>& on_server_done,
                      pb::GcReply* reply) {
  if (servers.size() == 1) return absl::OkStatus();
  std::vector<std::string> live;
  if (!none_live) {
    auto fetched = FetchLiveChunks(coord, job, servers.timeout_s());
    if (!fetched.ok()) {
      return WithContext(fetched.status(), "collecting on the other servers");
    }
    live = std::move(*fetched);
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    ServerConn& s = servers.server(i);
    if (&s == &coord) continue;
    STAGGER_ASSIGN_OR_RETURN(pb::SweepReply swept, Sweep(s, job, live, grace_ms,
                                                         servers.timeout_s()));
    reply->set_chunks_deleted(reply->chunks_deleted() + swept.chunks_deleted());
    reply->set_bytes_freed(reply->bytes_freed() + swept.bytes_freed());
    AddGraceKept(swept.grace_kept(), reply->mutable_grace_kept());
    if (swept.has_compaction()) {
      AddCompaction(swept.compaction(), s.address, reply->mutable_compaction());
    }
    if (on_server_done) on_server_done();
  }
  return absl::OkStatus();
}

// Whether any of the servers holds a step of `job` (partial ones too); the
// job's bytes on their disks in *disk_bytes.
Result<bool> AnyStep(ServerSet& servers, const std::string& job,
                     uint64_t* disk_bytes) {
  STAGGER_ASSIGN_OR_RETURN(
      std::vector<pb::StepInfo> steps,
      ListSteps(servers, job, /*include_partial=*/true, disk_bytes));
  return !steps.empty();
}

}  // namespace

Result<std::vector<pb::JobInfo>> ListJobs(ServerSet& servers) {
  std::map<std::string, pb::JobInfo> merged;
  pb::ListJobsRequest req;
  // The order of the servers does not matter here: every one is asked.
  STAGGER_RETURN_IF_ERROR(OnEveryServer(servers, "", [&](ServerConn& s) {
    pb::ListJobsReply reply;
    STAGGER_RETURN_IF_ERROR(Unary(servers, s, [&](grpc::ClientContext* ctx) {
      return s.stub->ListJobs(ctx, req, &reply);
    }));
    for (const pb::JobInfo& j : reply.jobs()) {
      auto [it, inserted] = merged.try_emplace(j.job(), j);
      if (inserted) continue;
      pb::JobInfo& m = it->second;
      // Steps: what the best-informed coordinator says; disk: every copy.
      m.set_steps_complete(std::max(m.steps_complete(), j.steps_complete()));
      m.set_steps_partial(std::max(m.steps_partial(), j.steps_partial()));
      m.set_latest_complete(std::max(m.latest_complete(), j.latest_complete()));
      m.set_disk_bytes(m.disk_bytes() + j.disk_bytes());
    }
    return absl::OkStatus();
  }));
  std::vector<pb::JobInfo> out;
  for (auto& [name, info] : merged) out.push_back(std::move(info));
  return out;
}

Result<pb::GcReply> Gc(ServerSet& servers, const std::string& job,
                       uint32_t keep, int64_t grace_ms,
                       const std::function<void()>& on_server_done,
                       bool keep_cold) {
  pb::GcReply reply;
  // The coordinator holds the job's steps and decides what is live.
  pb::GcRequest req;
  req.set_job(job);
  req.set_keep(keep);
  req.set_keep_cold(keep_cold);
  req.set_grace_ms(grace_ms);
  req.set_wait_for_compaction(true);
  STAGGER_RETURN_IF_ERROR(
      NeedEveryServer(servers, absl::StrCat("gc of job '", job, "'")));
  // With no step anywhere no server can tell what is live: gc deletes
  // nothing and says so; what an unfinished first save left is deleted by
  // name (DeleteSteps with all).
  uint64_t disk_bytes = 0;
  STAGGER_ASSIGN_OR_RETURN(bool any, AnyStep(servers, job, &disk_bytes));
  if (!any) {
    return absl::NotFoundError(absl::StrCat(
        "job '", job, "' has no steps on the ", servers.size(), " server",
        servers.size() == 1 ? "" : "s", " listed",
        disk_bytes == 0
            ? "; nothing to collect"
            : absl::StrCat(" (", disk_bytes,
                           " bytes of its chunks are there): if its steps "
                           "are on servers not listed, list every server "
                           "of the job; if it has none (a save that never "
                           "committed, or steps deleted within the grace "
                           "period), 'stagger rm --job ",
                           job, " --all' deletes them")));
  }
  ServerConn& coord = *servers.Coordinators(job).front();
  STAGGER_RETURN_IF_ERROR(Unary(servers, coord, [&](grpc::ClientContext* ctx) {
    return coord.stub->Gc(ctx, req, &reply);
  }));
  if (on_server_done) on_server_done();
  STAGGER_RETURN_IF_ERROR(SweepTheOthers(servers, coord, job, grace_ms,
                                         /*none_live=*/false, on_server_done,
                                         &reply));
  return reply;
}

Result<pb::GcReply> DeleteSteps(ServerSet& servers, const std::string& job,
                                const std::vector<int64_t>& steps, bool all,
                                int64_t grace_ms,
                                const std::function<void()>& on_server_done,
                                bool keep_cold) {
  pb::GcReply reply;
  pb::DeleteStepsRequest req;
  req.set_job(job);
  for (int64_t s : steps) req.add_steps(s);
  req.set_all(all);
  req.set_keep_cold(keep_cold);
  req.set_grace_ms(grace_ms);
  req.set_wait_for_compaction(true);
  STAGGER_RETURN_IF_ERROR(NeedEveryServer(
      servers, absl::StrCat("deleting steps of job '", job, "'")));
  if (all) {
    // A job without a step on any server listed (its first save never
    // committed, e.g. stopped by Ctrl-C): nothing of it is live, and every
    // server drops its chunks (those younger than the grace period stay).
    uint64_t disk_bytes = 0;
    STAGGER_ASSIGN_OR_RETURN(bool any, AnyStep(servers, job, &disk_bytes));
    if (!any) {
      if (disk_bytes == 0) {
        return absl::NotFoundError(absl::StrCat(
            "job '", job, "' has no steps and no chunks on the ",
            servers.size(), " server", servers.size() == 1 ? "" : "s",
            " listed; nothing was deleted"));
      }
      for (size_t i = 0; i < servers.size(); ++i) {
        ServerConn& s = servers.server(i);
        STAGGER_ASSIGN_OR_RETURN(
            pb::SweepReply swept,
            Sweep(s, job, {}, grace_ms, servers.timeout_s()));
        reply.set_chunks_deleted(reply.chunks_deleted() +
                                 swept.chunks_deleted());
        reply.set_bytes_freed(reply.bytes_freed() + swept.bytes_freed());
        AddGraceKept(swept.grace_kept(), reply.mutable_grace_kept());
        if (swept.has_compaction()) {
          AddCompaction(swept.compaction(), s.address,
                        reply.mutable_compaction());
        }
        if (on_server_done) on_server_done();
      }
      return reply;
    }
  }
  ServerConn& coord = *servers.Coordinators(job).front();
  STAGGER_RETURN_IF_ERROR(Unary(servers, coord, [&](grpc::ClientContext* ctx) {
    return coord.stub->DeleteSteps(ctx, req, &reply);
  }));
  if (on_server_done) on_server_done();
  STAGGER_RETURN_IF_ERROR(SweepTheOthers(servers, coord, job, grace_ms,
                                         reply.steps_kept() == 0,
                                         on_server_done, &reply));
  return reply;
}

}  // namespace stagger::client
