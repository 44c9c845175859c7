#include "client/chunk_io.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/internal/window.h"
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "util/log.h"

namespace stagger::client {
namespace {

using client_internal::Window;
using format::DataOp;

// A delta chain longer than this is refused as corrupt (writers cap chains
// far below it); it also stops a cycle of bases.
// Links a load follows from a chunk to a whole one: the servers keep a
// keyframe every RebaserOptions::max_behind_hops (64) deltas; forward
// deltas not yet rebased add a few.
constexpr int kMaxDeltaDepth = 1024;

// Copies the runs of a decoded chunk to their places in `dest`.
Status Scatter(std::string_view chunk, const std::vector<format::CopyRun>& runs,
               char* dest) {
  for (const format::CopyRun& r : runs) {
    if (r.src > chunk.size() || r.length > chunk.size() - r.src) {
      return absl::InternalError(
          absl::StrCat("copy of ", r.length, " bytes at ", r.src,
                       " leaves the ", chunk.size(), "-byte chunk"));
    }
    std::memcpy(dest + r.dst, chunk.data() + r.src, r.length);
  }
  return absl::OkStatus();
}

}  // namespace

ChunkIo::ChunkIo(Executor* executor, std::string job, CodecChoice codec,
                 format::EncodeOptions encode, size_t max_inflight,
                 CodecPolicy* policy, Shaping* shaping)
    : executor_(executor),
      job_(std::move(job)),
      codec_(codec),
      encode_(encode),
      max_inflight_(max_inflight),
      policy_(codec_ == CodecChoice::kAuto ? policy : nullptr),
      shaping_(shaping),
      sender_(max_inflight, policy_, shaping) {}

int ChunkIo::DefaultFetchThreads() {
  return std::clamp(2 * static_cast<int>(std::thread::hardware_concurrency()),
                    4, 16);
}

// One item's fetch: the servers it tries in turn and what each said.
struct ChunkIo::FetchAttempt {
  const FetchItem* item;
  format::ChunkId id;
  size_t next = 0;     // index into item->servers
  bool whole = false;  // a range was refused: fetch whole chunks only
  std::vector<std::string> errors;
  std::vector<ServerConn*> bad;  // answered with bytes that failed checks
  // The kind of the final error: bad bytes above all, then any failure
  // other than "not here" or a dead server, then a dead server.
  absl::StatusCode code = absl::StatusCode::kNotFound;
  void Note(const Status& s) {
    auto rank = [](absl::StatusCode c) {
      if (c == absl::StatusCode::kDataLoss) return 3;
      if (c == absl::StatusCode::kNotFound) return 0;
      if (IsServerGone(Status(c, ""))) return 1;
      return 2;
    };
    if (rank(s.code()) > rank(code)) code = s.code();
  }
  std::function<void(const Status&)> finish;
};

Status ChunkIo::Fetch(
    const std::vector<FetchItem>& items,
    const std::function<void(size_t, const Status&)>& on_result,
    const std::function<void(uint64_t)>& on_fetched,
    const std::atomic<bool>* cancel) {
  for (const FetchItem& item : items) {
    STAGGER_RETURN_IF_ERROR(
        format::ChunkId::FromBytes(item.ref->id()).status());
  }
  Window window(max_inflight_, /*stop_on_error=*/!on_result);
  for (size_t i = 0; i < items.size(); ++i) {
    const FetchItem& item = items[i];
    if (!window.Acquire()) break;
    if (cancel != nullptr && cancel->load()) {
      window.Release(absl::CancelledError(absl::StrCat(
          "cancelled after ", i, " of ", items.size(), " chunks were issued")));
      break;
    }
    if (item.servers.empty()) {
      window.Release(absl::InternalError("fetch without a server"));
      continue;
    }
    auto a = std::make_shared<FetchAttempt>();
    a->item = &item;
    a->id = *format::ChunkId::FromBytes(item.ref->id());
    const uint64_t raw = item.ref->raw_length();
    a->finish = [&window, &on_result, &on_fetched, i, raw](const Status& s) {
      if (s.ok() && on_fetched) on_fetched(raw);
      if (on_result) on_result(i, s);
      window.Release(s);
    };
    FetchFrom(std::move(a));
  }
  return window.Drain();
}

void ChunkIo::FetchFrom(std::shared_ptr<FetchAttempt> a) {
  const FetchItem& item = *a->item;
  while (a->next < item.servers.size() && item.servers[a->next]->down) {
    ServerConn* s = item.servers[a->next++];
    absl::MutexLock l(&s->mu);
    a->errors.push_back(
        absl::StrCat("server ", s->address, " is down (", s->down_reason, ")"));
    a->Note(absl::UnavailableError(""));
  }
  if (a->next == item.servers.size()) {
    a->finish(Status(a->code, absl::StrCat("chunk ", a->id.ToHex(),
                                           ": no good copy on any server: ",
                                           absl::StrJoin(a->errors, "; "))));
    return;
  }
  ServerConn* server = item.servers[a->next++];
  std::shared_ptr<transport::Connection> data = server->Data();
  if (data == nullptr) {
    ServerSet::MarkDown(server, absl::UnavailableError("not connected"));
    FetchFrom(std::move(a));  // the next server, or the error
    return;
  }
  if (!item.parts.empty() && item.scatter != nullptr && item.dest != nullptr &&
      !a->whole && server->serves_ranges.load()) {
    FetchRange(std::move(a), server, *data);
    return;
  }
  auto on_reply = [this, a, server](Result<transport::Message> reply) {
    auto failed = [this, a, server](const Status& s) {
      if (IsServerGone(s)) ServerSet::MarkDown(server, s);
      const bool last = a->next >= a->item->servers.size();
      if (last && a->errors.empty()) {
        // The only place to ask: its own error, unchanged in kind.
        a->finish(
            WithContext(s, absl::StrCat("chunk ", a->id.ToHex(),
                                        " from server ", server->address)));
        return;
      }
      a->errors.push_back(
          absl::StrCat("server ", server->address, ": ", s.message()));
      a->Note(s);
      if (absl::IsDataLoss(s)) a->bad.push_back(server);
      FetchFrom(a);
    };
    if (!reply.ok()) {
      failed(reply.status());
      return;
    }
    // Decoding is CPU work: move it off the progress thread.
    auto msg = std::make_shared<transport::Message>(std::move(*reply));
    executor_->Submit([this, a, server, msg, failed] {
      Status s = DecodeFetched(*a, server, *msg);
      if (s.ok()) {
        a->finish(s);
      } else {
        failed(s);
      }
    });
  };
  // The record's size as the manifest has it: a server reading it from its
  // cold tier then asks the store once.
  const uint64_t hint =
      server->takes_size_hints.load() && item.ref != nullptr &&
              item.ref->stored_length() > 0
          ? format::kRecordHeaderSize + item.ref->stored_length()
          : 0;
  const std::string request = format::EncodeGetChunk({job_, a->id, hint});
  if (item.dest == nullptr || item.scatter != nullptr) {
    data->Call(static_cast<uint16_t>(DataOp::kGetChunk), request,
               std::string_view(), std::move(on_reply));
    return;
  }
  // A chunk that maps to one contiguous run: a raw copy of it lands in the
  // destination as it is received, and is checked there (DecodeReply).
  data->CallInto(static_cast<uint16_t>(DataOp::kGetChunk), request,
                 std::string_view(), std::move(on_reply),
                 IntoDestination(a->id, item));
}

transport::ReplyInto ChunkIo::IntoDestination(const format::ChunkId& id,
                                              const FetchItem& item) {
  const size_t raw = item.ref->raw_length();
  transport::ReplyInto into;
  into.data = item.dest;
  into.size = raw;
  into.accept = [id, raw](std::string_view header) {
    Result<format::Reply> r = format::DecodeReply(header);
    return r.ok() && r->status.ok() && r->has_record &&
           r->record.codec == format::Codec::kRaw && r->record.chunk_id == id &&
           r->record.raw_length == raw && r->record.encoded_length == raw;
  };
  return into;
}

void ChunkIo::FetchRange(std::shared_ptr<FetchAttempt> a, ServerConn* server,
                         transport::Connection& data) {
  data.Call(
      static_cast<uint16_t>(DataOp::kGetRange),
      format::EncodeGetRange({job_, a->id, a->item->parts}), std::string_view(),
      [this, a, server](Result<transport::Message> reply) {
        // Whatever went wrong, the whole chunk from the same server next:
        // that path reads the cold tier, reports, tries other copies and
        // repairs; a server gone is skipped there.
        auto whole = [this, a, server](const Status& s) {
          if (IsServerGone(s)) ServerSet::MarkDown(server, s);
          a->whole = true;
          --a->next;
          FetchFrom(a);
        };
        if (!reply.ok()) {
          whole(reply.status());
          return;
        }
        auto msg = std::make_shared<transport::Message>(std::move(*reply));
        executor_->Submit([a, msg, whole] {
          Status s = ScatterRange(*a, *msg);
          if (s.ok()) {
            a->finish(s);
          } else {
            whole(s);
          }
        });
      });
}

Status ChunkIo::ScatterRange(const FetchAttempt& a,
                             const transport::Message& msg) {
  const FetchItem& item = *a.item;
  STAGGER_ASSIGN_OR_RETURN(format::RangeReply r,
                           format::DecodeRangeReply(msg.header));
  STAGGER_RETURN_IF_ERROR(r.status);
  uint64_t total = 0;
  for (const format::ChunkPart& p : item.parts) total += p.length;
  if (msg.payload.size() != total) {
    return absl::DataLossError(absl::StrCat("parts of chunk ", a.id.ToHex(),
                                            " are ", msg.payload.size(),
                                            " bytes, asked for ", total));
  }
  if (format::Crc32c(msg.payload.data(), msg.payload.size()) != r.crc32c) {
    return absl::DataLossError(
        absl::StrCat("parts of chunk ", a.id.ToHex(), " fail their CRC-32C"));
  }
  // Each run lies in one part (the parts were cut around the runs).
  std::vector<uint64_t> at(item.parts.size());  // where each part starts
  for (size_t i = 1; i < at.size(); ++i) {
    at[i] = at[i - 1] + item.parts[i - 1].length;
  }
  for (const format::CopyRun& run : *item.scatter) {
    auto it = std::upper_bound(item.parts.begin(), item.parts.end(), run.src,
                               [](uint64_t src, const format::ChunkPart& p) {
                                 return src < p.offset;
                               });
    const size_t k = static_cast<size_t>(it - item.parts.begin());
    if (k == 0 || run.src + run.length >
                      item.parts[k - 1].offset + item.parts[k - 1].length) {
      return absl::InternalError(
          absl::StrCat("copy of ", run.length, " bytes at ", run.src,
                       " of chunk ", a.id.ToHex(), " is in no part asked for"));
    }
    std::memcpy(
        item.dest + run.dst,
        msg.payload.data() + at[k - 1] + (run.src - item.parts[k - 1].offset),
        run.length);
  }
  return absl::OkStatus();
}

Status ChunkIo::DecodeFetched(const FetchAttempt& a, ServerConn* server,
                              const transport::Message& msg) {
  const FetchItem& item = *a.item;
  const size_t raw = item.ref->raw_length();
  std::string scratch;
  char* dest = item.dest;
  if (dest == nullptr || item.scatter != nullptr) {
    scratch.resize(raw);
    dest = scratch.data();
  }
  STAGGER_RETURN_IF_ERROR(
      DecodeReply(server, a.id, raw, msg, dest, kMaxDeltaDepth, item.servers));
  if (item.scatter != nullptr && item.dest != nullptr) {
    STAGGER_RETURN_IF_ERROR(Scatter(scratch, *item.scatter, item.dest));
  }
  // Read repair: the copies found bad get these good bytes (the servers
  // marked them on the read, so the puts rewrite them).
  if (!a.bad.empty()) RepairBadCopies(a.id, dest, raw, a.bad);
  return absl::OkStatus();
}

void ChunkIo::RepairBadCopies(const format::ChunkId& id, const char* bytes,
                              size_t len, const std::vector<ServerConn*>& bad) {
  std::string where;
  for (ServerConn* b : bad) {
    absl::StrAppend(&where, where.empty() ? "" : ", ", b->address);
  }
  PutCopies(id, bytes, len, bad, [id, where](const Status& st) {
    if (st.ok()) {
      log::Info("stagger",
                absl::StrCat("repaired chunk ", id.ToHex(), " on ", where));
    } else {
      log::Warning("stagger",
                   absl::StrCat("repair of chunk ", id.ToHex(), " on ", where,
                                " failed: ", st.message()));
    }
  });
}

Result<format::RecordHeader> ChunkIo::CheckReply(
    const format::ChunkId& id, size_t raw_length,
    const transport::Message& msg) {
  auto r = format::DecodeReply(msg.header);
  Status s = r.ok() ? r->status : r.status();
  if (s.ok() && !r->has_record) {
    s = absl::DataLossError("reply carries no record header");
  }
  if (s.ok()) {
    // A raw payload is the chunk itself: DecodeReply hashes it against the
    // chunk id, which checks the same bytes end to end, so its CRC would be
    // a second pass over every byte of a load for nothing. An encoded
    // payload is checked before it reaches a decoder.
    s = r->record.codec == format::Codec::kRaw
            ? (msg.payload.size() == r->record.encoded_length
                   ? absl::OkStatus()
                   : absl::DataLossError(absl::StrCat(
                         "payload is ", msg.payload.size(),
                         " bytes, header says ", r->record.encoded_length)))
            : format::VerifyPayload(r->record, msg.payload.view());
  }
  if (s.ok() &&
      (r->record.chunk_id != id || r->record.raw_length != raw_length)) {
    s = absl::DataLossError("server returned a different chunk");
  }
  STAGGER_RETURN_IF_ERROR(s);
  return r->record;
}

Status ChunkIo::DecodeReply(ServerConn* server, const format::ChunkId& id,
                            size_t raw_length, const transport::Message& msg,
                            char* out, int depth_left,
                            const std::vector<ServerConn*>& others) {
  STAGGER_ASSIGN_OR_RETURN(format::RecordHeader top,
                           CheckReply(id, raw_length, msg));
  // The chain down to a whole chunk (a delta's base may be a delta too),
  // each link from the same server first (it holds every version of the
  // slot), then from the other copies; decoded back up with two buffers.
  struct Link {
    format::ChunkId id;
    format::Codec codec;
    std::string_view payload;
  };
  std::vector<Link> chain{{id, top.codec, msg.payload.view()}};
  std::vector<std::unique_ptr<transport::Message>> held;
  while (format::IsDelta(chain.back().codec)) {
    if (static_cast<int>(chain.size()) > depth_left) {
      return absl::DataLossError("delta chain too long (a cycle?)");
    }
    STAGGER_ASSIGN_OR_RETURN(format::ChunkId base_id,
                             format::DeltaBase(chain.back().payload));
    Status got = absl::UnavailableError("no server holds the base");
    for (size_t i = 0; i <= others.size(); ++i) {
      ServerConn* from = i == 0 ? server : others[i - 1];
      if (i > 0 && (from == server || from->down)) continue;
      auto m = FetchRecord(from, base_id, raw_length);
      got = m.status();
      if (!got.ok()) continue;
      held.push_back(
          std::make_unique<transport::Message>(std::move(m->second)));
      chain.push_back({base_id, m->first.codec, held.back()->payload.view()});
      break;
    }
    STAGGER_RETURN_IF_ERROR_CTX(got, "delta base ", base_id.ToHex());
  }
  std::string below, above;
  if (chain.size() > 1) {
    below.resize(raw_length);
    above.resize(raw_length);
  }
  for (size_t i = chain.size(); i-- > 0;) {
    const Link& l = chain[i];
    char* dest = i == 0 ? out : above.data();
    if (i + 1 == chain.size() && l.codec == format::Codec::kRaw &&
        l.payload.data() == dest && l.payload.size() == raw_length) {
      // Received in place (ChunkIo::IntoDestination): checked below.
    } else if (i + 1 == chain.size()) {
      STAGGER_RETURN_IF_ERROR(
          format::Decode(l.codec, l.payload, dest, raw_length));
    } else {
      STAGGER_RETURN_IF_ERROR(
          format::DecodeDelta(l.codec, l.payload, below, dest, raw_length));
    }
    if (format::ChunkId::Of(dest, raw_length) != l.id) {
      return absl::DataLossError(
          i == 0 ? std::string("decoded bytes do not match chunk id")
                 : absl::StrCat("delta base ", l.id.ToHex(),
                                ": decoded bytes do not match chunk id"));
    }
    if (i != 0) std::swap(below, above);
  }
  return absl::OkStatus();
}

Result<std::pair<format::RecordHeader, transport::Message>>
ChunkIo::FetchRecord(ServerConn* server_conn, const format::ChunkId& id,
                     size_t raw_length) {
  ServerConn& server = *server_conn;
  std::shared_ptr<transport::Connection> data = server.Data();
  if (data == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("server ", server.address, " is not connected"));
  }
  auto reply =
      data->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                     format::EncodeGetChunk({job_, id}), std::string_view());
  if (!reply.ok() && IsServerGone(reply.status())) {
    ServerSet::MarkDown(server_conn, reply.status());
  }
  STAGGER_RETURN_IF_ERROR(reply.status());
  auto header = CheckReply(id, raw_length, *reply);
  STAGGER_RETURN_IF_ERROR_CTX(header.status(), "chunk ", id.ToHex(),
                              " from server ", server.address);
  return std::make_pair(*header, std::move(*reply));
}

}  // namespace stagger::client
