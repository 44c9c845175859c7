// `stagger verify [--repair]`: every copy of every chunk of a step, read
// and checked on its own; with --repair, bad and missing copies rewritten
// from a good one.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "client/chunk_io.h"
#include "client/cli/commands.h"
#include "client/cli/progress.h"
#include "client/cli/session.h"

namespace stagger::client {
namespace {

// What the servers said about one chunk's copies.
struct ChunkCopies {
  const pb::ChunkRef* ref = nullptr;
  std::string label;  // "rank R tensor 'T' chunk I"
  std::vector<ServerConn*> ranked;
  size_t replicas = 1;
  std::vector<ServerConn*> good;
  std::vector<ServerConn*> bad;  // answered with a copy that fails checks
  std::vector<std::string> unreachable;
};

// Rewrites `c`'s missing and bad copies from its first good one: onto the
// servers with a bad copy (a read marked it for repair there), then onto
// the next servers of its ranking that lack one, until it has `replicas`.
// Returns the servers written.
Result<std::vector<ServerConn*>> Repair(ChunkIo& io, const ChunkCopies& c) {
  std::vector<ServerConn*> targets;
  for (ServerConn* s : c.bad) {
    if (!s->down) targets.push_back(s);
  }
  auto holds = [&](ServerConn* s) {
    return std::find(c.good.begin(), c.good.end(), s) != c.good.end() ||
           std::find(targets.begin(), targets.end(), s) != targets.end();
  };
  for (ServerConn* s : c.ranked) {
    if (c.good.size() + targets.size() >= c.replicas) break;
    if (!s->down && !holds(s)) targets.push_back(s);
  }
  if (targets.empty()) return targets;
  std::string bytes(c.ref->raw_length(), '\0');
  FetchItem item{c.ref, bytes.data(), {c.good.front()}};
  STAGGER_RETURN_IF_ERROR(io.Fetch({item}, nullptr));
  auto id = format::ChunkId::FromBytes(c.ref->id());
  STAGGER_RETURN_IF_ERROR(id.status());
  absl::Notification done;
  Status put;
  io.PutCopies(*id, bytes.data(), bytes.size(), targets, [&](const Status& s) {
    put = s;
    done.Notify();
  });
  done.WaitForNotification();
  STAGGER_RETURN_IF_ERROR(put);
  return targets;
}

std::string Addresses(const std::vector<ServerConn*>& servers) {
  std::vector<std::string> out;
  for (ServerConn* s : servers) out.push_back(s->address);
  return absl::StrJoin(out, ", ");
}

// Every chunk of the step, with the servers its copies belong on; `bytes`
// gets their raw size.
std::vector<ChunkCopies> ListChunks(const pb::GetStepReply& reply,
                                    ServerSet& servers, uint64_t* bytes) {
  std::vector<ChunkCopies> chunks;
  for (const pb::ShardManifest& shard : reply.shards()) {
    for (const pb::TensorEntry& t : shard.tensors()) {
      for (int i = 0; i < t.chunks_size(); ++i) {
        ChunkCopies c;
        c.ref = &t.chunks(i);
        c.label = absl::StrCat("rank ", shard.rank(), " tensor '", t.name(),
                               "' chunk ", i);
        c.ranked = servers.ForSlot(shard.rank(), t.name(), i, shard.node());
        c.replicas = std::max<uint32_t>(1, shard.replicas());
        *bytes += c.ref->raw_length();
        chunks.push_back(std::move(c));
      }
    }
  }
  return chunks;
}

// Reads every copy of every chunk from each server up, on its own, and
// files each server under good, bad or unreachable; prints BAD lines.
void CheckCopies(ChunkIo& io, std::vector<ChunkCopies>& chunks) {
  std::vector<FetchItem> items;
  std::vector<std::pair<size_t, ServerConn*>> owner;
  uint64_t copy_bytes = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (ServerConn* s : chunks[i].ranked) {
      if (s->down) continue;
      items.push_back({chunks[i].ref, nullptr, {s}});
      owner.emplace_back(i, s);
    }
    copy_bytes += chunks[i].ref->raw_length() * chunks[i].replicas;
  }
  std::mutex mu;
  Progress progress("verify", copy_bytes);
  // Every outcome, NOT_FOUND included, comes to the callback.
  io.Fetch(
        items,
        [&](size_t k, const Status& s) {
          std::lock_guard<std::mutex> lock(mu);
          auto [i, server] = owner[k];
          ChunkCopies& c = chunks[i];
          if (s.ok()) {
            c.good.push_back(server);
          } else if (absl::IsNotFound(s)) {
            // Not placed there: the normal case for most servers.
          } else if (IsServerGone(s)) {
            c.unreachable.push_back(
                absl::StrCat(server->address, ": ", std::string(s.message())));
          } else {
            c.bad.push_back(server);
            printf("BAD %s on server %s: %s: %s\n", c.label.c_str(),
                   server->address.c_str(),
                   absl::StatusCodeToString(s.code()).c_str(),
                   std::string(s.message()).c_str());
          }
        },
        [&progress](uint64_t n) { progress.Add(n); })
      .IgnoreError();
  progress.Finish();
}

// What the chunks' copies came to.
struct Tally {
  size_t bad = 0;       // chunks with a bad copy or no good one
  size_t degraded = 0;  // chunks left with fewer copies than saved with
  size_t repaired_chunks = 0;
  size_t repaired_copies = 0;
  bool repair_failed = false;
  bool lost = false;  // a chunk with no good copy anywhere
};

// Judges one chunk's copies (and, with `repair`, rewrites the missing and
// bad ones), printing what it found and did.
void Judge(ChunkIo& io, bool repair, const ChunkCopies& c, Tally* t) {
  const bool corrupt = !c.bad.empty();
  if (c.good.empty()) {
    ++t->bad;
    t->lost = true;
    std::string why = c.unreachable.empty()
                          ? std::string("no server holds it")
                          : absl::StrJoin(c.unreachable, "; ");
    printf("BAD %s: no good copy (%s)\n", c.label.c_str(), why.c_str());
    return;
  }
  if (corrupt) ++t->bad;
  if (c.good.size() < c.replicas && !corrupt) {
    printf("DEGRADED %s: %zu of %zu copies good (on %s)\n", c.label.c_str(),
           c.good.size(), c.replicas, Addresses(c.good).c_str());
  }
  if (!repair) {
    if (c.good.size() < c.replicas) ++t->degraded;
    return;
  }
  if (!corrupt && c.good.size() >= c.replicas) return;
  auto written = Repair(io, c);
  if (!written.ok()) {
    t->repair_failed = true;
    printf("REPAIR FAILED %s: %s: %s\n", c.label.c_str(),
           absl::StatusCodeToString(written.status().code()).c_str(),
           std::string(written.status().message()).c_str());
    return;
  }
  if (!written->empty()) {
    ++t->repaired_chunks;
    t->repaired_copies += written->size();
    printf("REPAIRED %s: wrote %zu cop%s to %s\n", c.label.c_str(),
           written->size(), written->size() == 1 ? "y" : "ies",
           Addresses(*written).c_str());
  }
  // A bad copy on a server that is down stays bad.
  for (ServerConn* s : c.bad) {
    if (std::find(written->begin(), written->end(), s) == written->end()) {
      t->repair_failed = true;
    }
  }
  // Still short: too few servers up to hold the copies.
  if (c.good.size() + written->size() < c.replicas) ++t->degraded;
}

// The summary line; the exit code.
int Report(const VerifyArgs& a, long long step, const Tally& t, size_t chunks,
           uint64_t bytes) {
  std::string tail;
  if (a.repair && (t.repaired_copies > 0 || t.bad > 0)) {
    absl::StrAppend(&tail, "; repaired ", t.repaired_copies, " copies of ",
                    t.repaired_chunks, " chunks");
  }
  if (t.degraded > 0) {
    absl::StrAppend(&tail, "; ", t.degraded,
                    " have fewer copies than the step was saved with",
                    a.repair ? " (too few servers up)"
                             : " (stagger verify --repair adds them)");
  }
  if (t.bad > 0) {
    printf("verify job '%s' step %lld: %zu of %zu chunks bad%s\n",
           a.job.c_str(), step, t.bad, chunks, tail.c_str());
    // A repair that rewrote every bad copy leaves the step whole.
    return (a.repair && !t.repair_failed && !t.lost) ? 0 : 1;
  }
  printf("verify job '%s' step %lld: all %zu chunks good (%llu bytes)%s\n",
         a.job.c_str(), step, chunks, static_cast<unsigned long long>(bytes),
         tail.c_str());
  return t.repair_failed ? 1 : 0;
}

}  // namespace

int RunVerify(const VerifyArgs& a) {
  if (auto step = ParseStep(a.step); !step.ok()) {
    return Usage("verify", step.status().message());
  }
  auto session = OpenSession(a.server);
  if (!session.ok()) return Fail("verify", session.status());
  auto reply = CompleteStep(*session, a.job, a.step);
  if (!reply.ok()) return Fail("verify", reply.status());
  ChunkIo io(session->executor.get(), a.job, CodecChoice::kRaw, {}, 16);
  uint64_t bytes = 0;
  std::vector<ChunkCopies> chunks =
      ListChunks(*reply, *session->servers, &bytes);
  CheckCopies(io, chunks);
  Tally tally;
  for (const ChunkCopies& c : chunks) Judge(io, a.repair, c, &tally);
  return Report(a, static_cast<long long>(reply->step().step()), tally,
                chunks.size(), bytes);
}

}  // namespace stagger::client
