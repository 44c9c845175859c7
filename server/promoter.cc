#include "server/promoter.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/auth.h"
#include "util/log.h"

namespace stagger::server {
namespace {

// Flush takes at most 2^20 ids a call.
constexpr size_t kMaxIdsPerFlush = size_t{1} << 20;

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

bool Promoter::CountCopies(const std::string& job,
                           const std::vector<std::string>& servers,
                           const std::vector<std::string>& ids,
                           std::vector<uint32_t>* copies) {
  copies->assign(ids.size(), 0);
  bool all = true;
  for (const std::string& server : servers) {
    for (size_t from = 0; from < ids.size(); from += kMaxIdsPerFlush) {
      const size_t n = std::min(kMaxIdsPerFlush, ids.size() - from);
      pb::FlushRequest req;
      req.set_job(job);
      for (size_t i = from; i < from + n; ++i) req.add_ids(ids[i]);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.flush_wait));
      if (!options_.token.empty()) {
        ctx.AddMetadata(kTokenMetadataKey, options_.token);
      }
      {
        absl::MutexLock l(&mu_);
        if (stop_) return false;
        call_ = &ctx;
        ++stats_.flush_calls;
      }
      pb::FlushReply reply;
      grpc::Status s = Peer(server)->Flush(&ctx, req, &reply);
      {
        absl::MutexLock l(&mu_);
        call_ = nullptr;
      }
      std::string& last = peer_errors_[server];
      if (!s.ok()) {
        const std::string why =
            absl::StrCat("flush of job '", job, "' on server ", server, ": ",
                         s.error_message());
        if (why != last) log::Warning("stagger-server", why);
        last = why;
        all = false;
        break;
      }
      last.clear();
      const std::string& bits = reply.on_disk();
      for (size_t k = 0; k < n; ++k) {
        if (k / 8 < bits.size() &&
            (static_cast<uint8_t>(bits[k / 8]) >> (k % 8)) & 1) {
          ++(*copies)[from + k];
        }
      }
    }
  }
  return all;
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
  uint64_t pending = 0;
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
    std::vector<uint32_t> copies;
    bool all_answered = false;
    if (!server_set.empty()) {
      all_answered = CountCopies(job, {server_set.begin(), server_set.end()},
                                 ids, &copies);
    }
    for (Item& it : items) {
      const MetaStore::MemoryShardRecord& r = *it.rec;
      if (r.shard.servers().empty()) {
        ++pending;  // no plan: its client promotes it, or nobody can
        continue;
      }
      uint32_t fewest = UINT32_MAX;
      size_t on_none = 0;
      for (const std::string& id : ShardIds(it.manifest)) {
        const size_t k = static_cast<size_t>(
            std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        const uint32_t n = copies.empty() ? 0 : copies[k];
        fewest = std::min(fewest, n);
        on_none += n == 0 ? 1 : 0;
      }
      if (fewest != UINT32_MAX && !copies.empty() &&
          fewest >= std::max<uint32_t>(1, r.shard.replicas())) {
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
      ++pending;
    }
    if (pending == pending_before) {
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
  return pending > 0;
}

}  // namespace stagger::server
