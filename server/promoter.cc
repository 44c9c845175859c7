#include "server/promoter.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format/codec.h"
#include "format/record.h"
#include "server/auth.h"
#include "util/log.h"

namespace stagger::server {
namespace {

// Flush takes at most 2^20 ids a call.
constexpr size_t kMaxIdsPerFlush = size_t{1} << 20;
// Records copied per ReadRecords call (held in memory on the way).
constexpr size_t kRepairBatch = 16;

// The ids a shard reads: its chunks and their delta bases.
std::vector<std::string> ShardIds(const pb::ShardManifest& m) {
  std::set<std::string> ids;
  for (const pb::TensorEntry& t : m.tensors()) {
    for (const pb::ChunkRef& c : t.chunks()) {
      ids.insert(c.id());
      if (!c.base_id().empty()) ids.insert(c.base_id());
    }
  }
  return {ids.begin(), ids.end()};
}

std::string Describe(const MetaStore::MemoryShardRecord& r) {
  return absl::StrCat("job '", r.job, "' step ", r.step, " rank ", r.rank);
}

}  // namespace

namespace {

PromoterOptions WithCredentials(PromoterOptions o) {
  if (o.credentials == nullptr)
    o.credentials = grpc::InsecureChannelCredentials();
  return o;
}

}  // namespace

Promoter::Promoter(MetaStore* meta, Commit commit, PromoterOptions options)
    : meta_(meta),
      commit_(std::move(commit)),
      options_(WithCredentials(std::move(options))) {
  wake_ = true;  // the shards set aside at start: a pass at once
  thread_ = std::thread([this] { Run(); });
}

Promoter::~Promoter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    if (call_ != nullptr) call_->TryCancel();
  }
  thread_.join();
}

void Promoter::Notify() {
  absl::MutexLock l(&mu_);
  wake_ = true;
}

PromoterStats Promoter::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

void Promoter::Run() {
  for (;;) {
    bool notified = false;
    {
      absl::MutexLock l(&mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || wake_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), options_.interval);
      if (stop_) return;
      notified = wake_;
      wake_ = false;
    }
    Pass(notified);
  }
}

pb::Stagger::Stub* Promoter::Peer(const std::string& address) {
  auto& stub = peers_[address];
  if (stub == nullptr) {
    stub = pb::Stagger::NewStub(
        grpc::CreateChannel(address, options_.credentials));
  }
  return stub.get();
}

grpc::ClientContext* Promoter::Begin(grpc::ClientContext* ctx,
                                     absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options_.token.empty()) {
    ctx->AddMetadata(kTokenMetadataKey, options_.token);
  }
  absl::MutexLock l(&mu_);
  if (stop_) return nullptr;
  call_ = ctx;
  return ctx;
}

void Promoter::End() {
  absl::MutexLock l(&mu_);
  call_ = nullptr;
}

void Promoter::NoteError(const std::string& server, const std::string& why) {
  std::string& last = peer_errors_[server];
  if (why != last) log::Warning("stagger-server", why);
  last = why;
}

Promoter::Census Promoter::CountCopies(const std::string& job,
                                       const std::vector<std::string>& servers,
                                       const std::vector<std::string>& ids) {
  Census c;
  c.servers = servers;
  c.copies.assign(ids.size(), 0);
  c.on.assign(servers.size(), std::vector<bool>(ids.size(), false));
  c.answered.assign(servers.size(), true);
  c.all_answered = true;
  c.unreachable_only = true;
  for (size_t si = 0; si < servers.size(); ++si) {
    const std::string& server = servers[si];
    for (size_t from = 0; from < ids.size(); from += kMaxIdsPerFlush) {
      const size_t n = std::min(kMaxIdsPerFlush, ids.size() - from);
      pb::FlushRequest req;
      req.set_job(job);
      for (size_t i = from; i < from + n; ++i) req.add_ids(ids[i]);
      grpc::ClientContext ctx;
      if (Begin(&ctx, options_.flush_wait) == nullptr) {
        c.all_answered = c.unreachable_only = false;
        return c;
      }
      {
        absl::MutexLock l(&mu_);
        ++stats_.flush_calls;
      }
      pb::FlushReply reply;
      grpc::Status s = Peer(server)->Flush(&ctx, req, &reply);
      End();
      if (!s.ok()) {
        NoteError(server, absl::StrCat("flush of job '", job, "' on server ",
                                       server, ": ", s.error_message()));
        c.answered[si] = false;
        c.all_answered = false;
        // A server that cannot be reached holds nothing anyone can read.
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
          c.unreachable_only = false;
        }
        break;
      }
      peer_errors_[server].clear();
      const std::string& bits = reply.on_disk();
      for (size_t k = 0; k < n; ++k) {
        if (k / 8 < bits.size() &&
            (static_cast<uint8_t>(bits[k / 8]) >> (k % 8)) & 1) {
          ++c.copies[from + k];
          c.on[si][from + k] = true;
        }
      }
    }
  }
  return c;
}

const std::string& Promoter::DomainOf(const std::string& server) {
  auto it = domains_.find(server);
  if (it != domains_.end()) return it->second;
  grpc::ClientContext ctx;
  pb::HelloReply reply;
  std::string domain = server;  // none named: a domain of its own
  if (Begin(&ctx, absl::Seconds(5)) != nullptr) {
    grpc::Status s = Peer(server)->Hello(&ctx, pb::HelloRequest(), &reply);
    End();
    if (!s.ok()) return domains_[""];  // not cached: asked again next time
    if (!reply.domain().empty()) domain = reply.domain();
  }
  return domains_[server] = domain;
}

size_t Promoter::Repair(const std::string& job, const Census& c,
                        const std::vector<std::string>& ids,
                        const std::vector<size_t>& short_ids,
                        uint32_t replicas) {
  // Per (holder, target): the ids to copy.
  std::map<std::pair<size_t, size_t>, std::vector<std::string>> moves;
  for (size_t k : short_ids) {
    std::set<std::string> used;
    size_t holder = SIZE_MAX;
    for (size_t si = 0; si < c.servers.size(); ++si) {
      if (!c.on[si][k]) continue;
      used.insert(DomainOf(c.servers[si]));
      if (holder == SIZE_MAX) holder = si;
    }
    if (holder == SIZE_MAX) continue;  // on no disk: nothing to copy from
    // Targets: servers that answered without it, a new domain first.
    std::vector<size_t> fresh, same;
    for (size_t si = 0; si < c.servers.size(); ++si) {
      if (!c.answered[si] || c.on[si][k]) continue;
      (used.count(DomainOf(c.servers[si])) ? same : fresh).push_back(si);
    }
    fresh.insert(fresh.end(), same.begin(), same.end());
    for (size_t t = 0; t < fresh.size() && c.copies[k] + t < replicas; ++t) {
      moves[{holder, fresh[t]}].push_back(ids[k]);
    }
  }
  size_t copied = 0;
  for (auto& [route, want] : moves) {
    for (size_t from = 0; from < want.size(); from += kRepairBatch) {
      copied +=
          CopyRecords(job, c.servers[route.first], c.servers[route.second],
                      {want.begin() + static_cast<ptrdiff_t>(from),
                       want.begin() + static_cast<ptrdiff_t>(std::min(
                                          want.size(), from + kRepairBatch))});
    }
  }
  return copied;
}

size_t Promoter::CopyRecords(const std::string& job, const std::string& from,
                             const std::string& to,
                             const std::vector<std::string>& ids) {
  pb::ReadRecordsRequest req;
  req.set_job(job);
  for (const std::string& id : ids) req.add_ids(id);
  std::vector<pb::ChunkRecord> records;
  {
    grpc::ClientContext ctx;
    if (Begin(&ctx, absl::Seconds(60)) == nullptr) return 0;
    auto reader = Peer(from)->ReadRecords(&ctx, req);
    pb::ChunkRecord rec;
    while (reader->Read(&rec)) records.push_back(std::move(rec));
    grpc::Status s = reader->Finish();
    End();
    if (!s.ok()) {
      NoteError(from,
                absl::StrCat("reading chunks of job '", job, "' from server ",
                             from, " to repair: ", s.error_message()));
      return 0;
    }
  }
  // Whole chunks before deltas: a delta is stored where its base is.
  std::stable_partition(records.begin(), records.end(),
                        [](const pb::ChunkRecord& r) {
                          auto h = format::DecodeRecordHeader(r.header());
                          return h.ok() && !format::IsDelta(h->codec);
                        });
  grpc::ClientContext ctx;
  if (Begin(&ctx, absl::Seconds(60)) == nullptr) return 0;
  pb::StoreRecordsReply reply;
  auto writer = Peer(to)->StoreRecords(&ctx, &reply);
  for (const pb::ChunkRecord& r : records) {
    if (!writer->Write(r)) break;
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  End();
  if (!s.ok()) {
    NoteError(to, absl::StrCat("storing chunks of job '", job, "' on server ",
                               to, " to repair: ", s.error_message()));
  }
  return reply.stored();
}

bool Promoter::Pass(bool notified) {
  // A commit (or the start) asks again at once; a job whose shards stayed
  // undecided is asked again after 1, 2, 4 ... 30 s (a degraded step, a
  // server down).
  if (notified) backoff_.clear();
  const absl::Time now = absl::Now();
  auto records = meta_->MemoryShards();
  if (!records.ok()) {
    log::Error("stagger-server",
               absl::StrCat("promoter: ", records.status().message()));
    return true;
  }
  // Each record's manifest, by job.
  struct Item {
    MetaStore::MemoryShardRecord* rec;
    pb::ShardManifest manifest;
  };
  std::map<std::string, std::vector<Item>> jobs;
  for (MetaStore::MemoryShardRecord& r : *records) {
    pb::ShardManifest m;
    if (r.shard.has_set_aside()) {
      m = r.shard.set_aside();
    } else {
      auto live = meta_->GetShard(r.job, r.step, r.rank);
      if (!live.ok() || !live->in_memory()) {
        // Made disk-level by its client, or deleted with its step.
        (void)meta_->ForgetMemoryShard(r.job, r.step, r.rank);
        continue;
      }
      m = std::move(*live);
    }
    jobs[r.job].push_back({&r, std::move(m)});
  }
  uint64_t pending = 0, degraded = 0;
  for (auto& [job, items] : jobs) {
    auto later = backoff_.find(job);
    if (later != backoff_.end() && now < later->second.next) {
      pending += items.size();
      continue;
    }
    const uint64_t pending_before = pending;
    std::set<std::string> id_set, server_set;
    for (const Item& it : items) {
      for (std::string& id : ShardIds(it.manifest)) id_set.insert(id);
      for (const std::string& s : it.rec->shard.servers()) server_set.insert(s);
    }
    const std::vector<std::string> ids(id_set.begin(), id_set.end());
    Census census;
    if (!server_set.empty()) {
      census = CountCopies(job, {server_set.begin(), server_set.end()}, ids);
    }
    const std::vector<uint32_t>& copies = census.copies;
    const bool all_answered = !server_set.empty() && census.all_answered;
    std::set<size_t> to_repair;  // positions in `ids`
    uint32_t repair_to = 0;
    for (Item& it : items) {
      const MetaStore::MemoryShardRecord& r = *it.rec;
      if (r.shard.servers().empty()) {
        ++pending;  // no plan: its client promotes it, or nobody can
        continue;
      }
      const uint32_t replicas = std::max<uint32_t>(1, r.shard.replicas());
      uint32_t fewest = UINT32_MAX;
      size_t on_none = 0;
      std::vector<size_t> short_ids;
      for (const std::string& id : ShardIds(it.manifest)) {
        const size_t k = static_cast<size_t>(
            std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        const uint32_t n = copies.empty() ? 0 : copies[k];
        fewest = std::min(fewest, n);
        on_none += n == 0 ? 1 : 0;
        if (n < replicas) short_ids.push_back(k);
      }
      if (fewest != UINT32_MAX && !copies.empty() && fewest >= replicas) {
        it.manifest.set_in_memory(false);
        auto info = commit_(it.manifest);
        absl::MutexLock l(&mu_);
        if (info.ok()) {
          ++stats_.promoted;
          log::Info("stagger-server",
                    absl::StrCat(Describe(r), ": every chunk on ", fewest,
                                 "+ disks; made disk-level by the servers"));
        } else {
          ++pending;
          log::Warning("stagger-server",
                       absl::StrCat(Describe(r), ": disk-level commit failed: ",
                                    info.status().message()));
        }
        continue;
      }
      if (r.shard.has_set_aside() && all_answered && on_none > 0) {
        Status s = meta_->ForgetMemoryShard(r.job, r.step, r.rank);
        absl::MutexLock l(&mu_);
        ++stats_.dropped;
        log::Warning(
            "stagger-server",
            absl::StrCat(Describe(r), " dropped: ", on_none,
                         " of its chunks are on no server's disk (they were "
                         "in memory only when the servers stopped)",
                         s.ok() ? "" : absl::StrCat("; ", s.message())));
        continue;
      }
      // Degraded: every chunk on a disk, some on fewer than asked, and
      // every server either answered or cannot be reached (a slow one may
      // still be writing behind). Copies go to the servers that answered
      // without them, in other domains first; a later pass promotes.
      if (!copies.empty() && census.unreachable_only && on_none == 0 &&
          !short_ids.empty()) {
        to_repair.insert(short_ids.begin(), short_ids.end());
        repair_to = std::max(repair_to, replicas);
        ++degraded;
      }
      ++pending;
    }
    size_t copied = 0;
    if (!to_repair.empty()) {
      copied = Repair(job, census, ids, {to_repair.begin(), to_repair.end()},
                      repair_to);
      absl::MutexLock l(&mu_);
      stats_.chunks_repaired += copied;
    }
    if (copied > 0) {
      log::Info("stagger-server",
                absl::StrCat("job '", job, "': copied ", copied, " of ",
                             to_repair.size(),
                             " chunk(s) of degraded memory-level shards to "
                             "servers that lacked them"));
      backoff_.erase(job);  // promoted at the next pass
    } else if (pending == pending_before) {
      backoff_.erase(job);
    } else {
      Backoff& b = backoff_[job];
      b.wait =
          std::min(absl::Seconds(30), std::max(options_.interval, 2 * b.wait));
      b.next = now + b.wait;
    }
  }
  absl::MutexLock l(&mu_);
  stats_.pending = pending;
  stats_.degraded = degraded;
  return pending > 0;
}

}  // namespace stagger::server
