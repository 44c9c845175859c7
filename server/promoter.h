// Promoter: makes memory-level shards disk-level from the server side, so
// that a step saved with durability "memory" reaches the disk level whether
// or not the trainer that saved it lives, and survives a restart of every
// server once its chunks reached their disks.
//
// A memory-level CommitShard names the servers the client put the shard's
// chunks on and the copies each needs (CommitShardRequest.copy_servers,
// replicas); the coordinator keeps them (pb::MemoryShard, in RocksDB). A
// pass, a second after the last or when a commit wakes it:
//
//   per job: every chunk id (and delta base) of its memory-level shards
//     ── Flush(job, ids) ──► each of their servers, one call per server:
//                            waits (up to flush_wait) for that server's
//                            write-behind, answers which ids it has on disk
//   per shard: every id on >= replicas disks ─► committed again without
//                                               in_memory (disk-level)
//              set aside at start, every server answered, an id on no
//              disk ─► forgotten: its bytes lived in RAM only (the step
//                      stays partial and is never listed complete)
//              degraded: every id on a disk, some on fewer than
//              replicas, every server answered or unreachable ─►
//                      ReadRecords from a server holding each,
//                      StoreRecords on servers that answered without
//                      it (other domains first); the next pass promotes
//              otherwise ─► asked again later (1, 2, 4 ... 30 s; at
//                           once when a commit comes)
//
// A shard the client made disk-level first is forgotten. A server that
// cannot reach its peers (they need a token and --peer-token-file is not
// given) leaves the shards to the client's promoter.
//
// Thread-safety: thread-safe; one thread of its own.
#ifndef STAGGER_SERVER_PROMOTER_H_
#define STAGGER_SERVER_PROMOTER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/stagger.grpc.pb.h"
#include "server/meta_store.h"
#include "stagger/status.h"

namespace stagger::server {

struct PromoterOptions {
  // Credentials to reach the other servers' control planes, and the token
  // sent to them (empty: none).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;
  absl::Duration interval = absl::Seconds(1);  // between passes
  absl::Duration flush_wait = absl::Seconds(5);
};

struct PromoterStats {
  uint64_t promoted = 0;  // shards made disk-level here
  uint64_t dropped = 0;   // set-aside shards whose chunks were on no disk
  uint64_t pending = 0;   // memory-level shards waiting, last pass
  uint64_t degraded = 0;  // of those, with a chunk short of its copies
  uint64_t chunks_repaired = 0;  // copies made for degraded shards
  uint64_t flush_calls = 0;
};

class Promoter {
 public:
  // Commits a shard (disk-level) as a CommitShard call would.
  using Commit = std::function<Result<pb::StepInfo>(const pb::ShardManifest&)>;

  // `meta` (not owned) outlives the Promoter. Starts its thread.
  Promoter(MetaStore* meta, Commit commit, PromoterOptions options);
  ~Promoter();  // stops the thread (a pass in flight finishes)

  // Runs a pass soon.
  void Notify();
  PromoterStats stats() const;

 private:
  void Run();
  // One pass over every record (`notified`: a commit woke it); returns
  // whether any is still waiting.
  bool Pass(bool notified);
  // Which of `ids` each server has on disk (a Flush each).
  struct Census {
    std::vector<std::string> servers;
    std::vector<uint32_t> copies;       // per id
    std::vector<std::vector<bool>> on;  // per server, per id
    std::vector<bool> answered;         // per server
    bool all_answered = false;
    bool unreachable_only = false;  // those that did not were unreachable
  };
  Census CountCopies(const std::string& job,
                     const std::vector<std::string>& servers,
                     const std::vector<std::string>& ids);
  // Copies the ids at `short_ids` (positions in `ids`) from a server
  // holding each to servers lacking it, other domains first, until each
  // has `replicas`; returns the copies made.
  size_t Repair(const std::string& job, const Census& c,
                const std::vector<std::string>& ids,
                const std::vector<size_t>& short_ids, uint32_t replicas);
  // ReadRecords on `from` piped into StoreRecords on `to`; returns the
  // records stored.
  size_t CopyRecords(const std::string& job, const std::string& from,
                     const std::string& to,
                     const std::vector<std::string>& ids);
  // A server's failure domain (Hello; its address when it names none).
  const std::string& DomainOf(const std::string& server);
  // A call's context: deadline, token, cancellable by the destructor
  // (nullptr once stopping); End() after the call.
  grpc::ClientContext* Begin(grpc::ClientContext* ctx, absl::Duration timeout);
  void End();
  // Logs a server's error once until it changes.
  void NoteError(const std::string& server, const std::string& why);
  // The control-plane client of another server (made once per address).
  pb::Stagger::Stub* Peer(const std::string& address);

  MetaStore* const meta_;
  const Commit commit_;
  const PromoterOptions options_;
  // Run's thread only.
  std::map<std::string, std::unique_ptr<pb::Stagger::Stub>> peers_;
  std::map<std::string, std::string> peer_errors_;  // last logged, by server
  std::map<std::string, std::string> domains_;      // by server
  struct Backoff {
    absl::Time next;
    absl::Duration wait;
  };
  std::map<std::string, Backoff> backoff_;  // by job: undecided last pass
  mutable absl::Mutex mu_;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // in flight
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  PromoterStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: uses the members above
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_PROMOTER_H_
