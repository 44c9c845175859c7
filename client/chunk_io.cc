#include "client/chunk_io.h"

#include <algorithm>
#include <chrono>
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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ChunkIo::ChunkIo(qos::Executor* executor, std::string job, std::string codec,
                 format::EncodeOptions encode, size_t max_inflight,
                 CodecPolicy* policy, Shaping* shaping)
    : executor_(executor),
      job_(std::move(job)),
      codec_(std::move(codec)),
      encode_(encode),
      max_inflight_(max_inflight),
      policy_(codec_ == "auto" ? policy : nullptr),
      shaping_(shaping),
      sender_(max_inflight, policy_, shaping) {}

int ChunkIo::DefaultFetchThreads() {
  return std::clamp(2 * static_cast<int>(std::thread::hardware_concurrency()),
                    4, 16);
}

format::Codec ChunkIo::CodecFor(int element_size) const {
  bool floats = element_size == 2 || element_size == 4 || element_size == 8;
  if (codec_ == "raw") return format::Codec::kRaw;
  if (codec_ == "zstd") return format::Codec::kZstd;
  // "auto" and "bytegroup+zstd": grouping only means something for floats.
  return floats ? format::Codec::kByteGroupZstd : format::Codec::kZstd;
}

// One chunk's put: its encodings and the copies still owed.
struct ChunkIo::PutState {
  std::vector<ServerConn*> ranked;
  size_t home = 0;     // ranked[0, home) hold every version of the slot
  std::string header;  // the put as encoded (maybe a delta)
  std::string_view payload;
  std::shared_ptr<std::string> owned;
  bool delta = false;
  // Raw data, for a copy of a delta that goes outside the home servers
  // (they lack its base).
  const char* data = nullptr;
  size_t len = 0;
  format::PutChunkRequest raw_req;
  uint64_t raw_bytes = 0;
  std::string hex;
  PutStats* stats = nullptr;
  absl::Mutex mu;
  std::vector<ServerConn*> tried ABSL_GUARDED_BY(mu);
  size_t owed ABSL_GUARDED_BY(mu) = 0;
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::function<void(const Status&)> done;
};

void ChunkIo::PutAsync(const std::vector<ServerConn*>& ranked, size_t replicas,
                       const char* data, size_t len, const format::ChunkId& id,
                       uint32_t crc32c, int element_size,
                       const DeltaBase* delta, pb::ChunkRef* ref,
                       PutStats* stats,
                       const std::function<void(bool)>& encoded,
                       std::function<void(const Status&)> done) {
  auto st = std::make_shared<PutState>();
  st->ranked = ranked;
  st->home = std::min(replicas, ranked.size());
  std::vector<ServerConn*> targets;
  for (ServerConn* s : ranked) {
    if (targets.size() < replicas && !s->down) targets.push_back(s);
  }
  if (targets.size() < replicas) {
    encoded(false);
    std::string down;
    for (ServerConn* s : ranked) {
      if (s->down) absl::StrAppend(&down, down.empty() ? "" : ", ", s->address);
    }
    done(absl::UnavailableError(
        absl::StrCat("chunk ", id.ToHex(), " needs ", replicas,
                     " copies but only ", targets.size(), " of ", ranked.size(),
                     " servers are up (down: ", down, ")")));
    return;
  }
  // A delta is stored only where its base is: on the slot's home servers.
  bool home_up = true;
  for (size_t i = 0; i < st->home; ++i) home_up = home_up && !ranked[i]->down;
  format::PutChunkRequest req;
  req.job = job_;
  req.record.chunk_id = id;
  req.record.raw_length = len;
  format::Codec want = CodecFor(element_size);
  CodecReason reason = CodecReason::kFixed;
  const bool may_delta = delta != nullptr && home_up;
  if (policy_ != nullptr && want != format::Codec::kRaw) {
    ChunkFacts facts;
    facts.paced = shaping_ != nullptr && shaping_->Paced();
    if (facts.paced) facts.pace_Bps = shaping_->PaceBps();
    facts.training = shaping_ != nullptr && shaping_->TrainingMarked();
    if (may_delta && !facts.training) {
      facts.xor_zero_fraction =
          XorZeroFraction(data, delta->bytes->data(), len);
    }
    const CodecDecision d = policy_->Decide(facts);
    reason = d.reason;
    if (!d.encode) want = format::Codec::kRaw;
  }
  const int64_t encode_start_ns = NowNs();
  if (may_delta && want != format::Codec::kRaw) {
    auto owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    // Plain "zstd" keeps its bytes ungrouped in deltas too.
    eo.element_size = (element_size > 0 && codec_ != "zstd") ? element_size : 1;
    // The numeric delta only where every home server can store it.
    for (size_t i = 0; i < st->home; ++i) {
      if (ranked[i]->codec_count.load() <=
          static_cast<uint32_t>(format::Codec::kNumDeltaByteGroupZstd)) {
        eo.numeric_delta = false;
      }
    }
    auto codec = format::EncodeDelta(std::string_view(data, len), *delta->bytes,
                                     delta->id, owned.get(), eo);
    if (codec.ok() && format::IsDelta(*codec)) {
      st->owned = std::move(owned);
      st->delta = true;
      req.record.codec = *codec;
      st->payload = *st->owned;
      ref->set_base_id(delta->id.ToBytes());
    }
  }
  if (st->owned != nullptr) {
    // Encoded as a delta above.
  } else if (want == format::Codec::kRaw) {
    st->payload = std::string_view(data, len);  // sent straight from staging
    req.record.codec = format::Codec::kRaw;
  } else {
    st->owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    eo.element_size = element_size;
    auto codec =
        format::Encode(want, std::string_view(data, len), st->owned.get(), eo);
    if (!codec.ok()) {
      encoded(false);
      done(codec.status());
      return;
    }
    req.record.codec = *codec;
    st->payload = *st->owned;
  }
  if (policy_ != nullptr && want != format::Codec::kRaw) {
    policy_->OnEncoded(len, st->payload.size(),
                       (NowNs() - encode_start_ns) * 1e-9);
  }
  if (st->owned != nullptr && codec_ == "auto" &&
      st->payload.size() > (1 - CodecPolicy::kMinGain) * len) {
    // Too little saved to be worth a decode at every load: raw.
    st->owned.reset();
    st->delta = false;
    ref->clear_base_id();
    st->payload = std::string_view(data, len);
    req.record.codec = format::Codec::kRaw;
    reason = CodecReason::kNoGain;
  }
  // A delta keeps its raw bytes while a copy may still have to go to a
  // server outside the home ones.
  const bool keep_data =
      st->owned == nullptr || (st->delta && ranked.size() > st->home);
  encoded(keep_data);
  if (st->delta && keep_data) {
    st->data = data;
    st->len = len;
    st->raw_req = req;
    st->raw_req.record.codec = format::Codec::kRaw;
    st->raw_req.record.encoded_length = len;
    st->raw_req.record.payload_crc32c = crc32c;
  }
  req.record.encoded_length = st->payload.size();
  // Raw, the payload is `data`, whose checksum came with its fingerprint.
  req.record.payload_crc32c =
      st->owned == nullptr
          ? crc32c
          : format::Crc32c(st->payload.data(), st->payload.size());
  ref->set_id(req.record.chunk_id.ToBytes());
  ref->set_raw_length(len);
  ref->set_codec(static_cast<uint32_t>(req.record.codec));
  ref->set_stored_length(st->payload.size());
  stats->bytes_raw += len;
  ++stats->chunks;
  ++stats->codec_chunks[static_cast<int>(req.record.codec)];
  ++stats->codec_reasons[static_cast<int>(reason)];
  st->header = format::EncodePutChunk(req);
  st->raw_bytes = len;
  st->hex = req.record.chunk_id.ToHex();
  st->stats = stats;
  st->done = std::move(done);
  {
    absl::MutexLock l(&st->mu);
    st->owed = targets.size();
    st->tried = targets;
  }
  for (ServerConn* s : targets) SendCopy(st, s);
}

void ChunkIo::SendCopy(std::shared_ptr<PutState> st, ServerConn* server) {
  SendItem p;
  p.server = server;
  const bool home = std::find(st->ranked.begin(), st->ranked.begin() + st->home,
                              server) != st->ranked.begin() + st->home;
  if (st->delta && !home) {
    // Outside the home servers the base is missing: send the bytes whole.
    p.header = format::EncodePutChunk(st->raw_req);
    p.payload = std::string_view(st->data, st->len);
  } else {
    p.header = st->header;
    p.payload = st->payload;
    p.owned = st->owned;
  }
  st->stats->bytes_shipped += p.payload.size();
  p.what = absl::StrCat("put chunk ", st->hex, " to server ", server->address);
  p.raw_bytes = st->raw_bytes;
  p.done = [this, st, server](const Status& s) {
    ServerConn* next = nullptr;
    Status fail;
    {
      absl::MutexLock l(&st->mu);
      if (st->finished) return;
      if (s.ok()) {
        if (--st->owed > 0) return;
        st->finished = true;
      } else if (IsServerGone(s)) {
        ServerSet::MarkDown(server, s);
        for (ServerConn* c : st->ranked) {
          if (c->down || std::find(st->tried.begin(), st->tried.end(), c) !=
                             st->tried.end()) {
            continue;
          }
          next = c;
          break;
        }
        if (next != nullptr) {
          st->tried.push_back(next);
        } else {
          st->finished = true;
          std::string down;
          for (ServerConn* c : st->ranked) {
            if (c->down) {
              absl::StrAppend(&down, down.empty() ? "" : ", ", c->address);
            }
          }
          fail = absl::UnavailableError(absl::StrCat(
              "chunk ", st->hex, ": no other server is up to take the copy ",
              "that ", server->address, " lost (servers down: ", down, "; ",
              s.message(), ")"));
        }
      } else {
        st->finished = true;
        fail = s;
      }
    }
    if (next != nullptr) {
      SendCopy(st, next);
      return;
    }
    st->done(fail);
  };
  sender_.Enqueue(std::move(p));
}

void ChunkIo::PutCopies(const format::ChunkId& id, const char* bytes,
                        size_t len, std::vector<ServerConn*> servers,
                        std::function<void(const Status&)> done) {
  struct Copy {
    std::string bytes;
    pb::ChunkRef ref;
    PutStats stats;
  };
  auto c = std::make_shared<Copy>();
  c->bytes.assign(bytes, len);
  const size_t n = servers.size();
  PutAsync(
      servers, n, c->bytes.data(), len, id, format::Crc32c(bytes, len), 0,
      nullptr, &c->ref, &c->stats, [](bool) {},
      [c, done = std::move(done)](const Status& s) { done(s); });
}

// One item's fetch: the servers it tries in turn and what each said.
struct ChunkIo::FetchAttempt {
  const FetchItem* item;
  format::ChunkId id;
  size_t next = 0;  // index into item->servers
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
  data->Call(
      static_cast<uint16_t>(DataOp::kGetChunk),
      format::EncodeGetChunk({job_, a->id}), std::string_view(),
      [this, a, server](Result<transport::Message> reply) {
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
          const FetchItem& item = *a->item;
          const size_t raw = item.ref->raw_length();
          std::string scratch;
          char* dest = item.dest;
          if (dest == nullptr || item.scatter != nullptr) {
            scratch.resize(raw);
            dest = scratch.data();
          }
          Status s = DecodeReply(server, a->id, raw, *msg, dest, kMaxDeltaDepth,
                                 item.servers);
          if (s.ok() && item.scatter != nullptr && item.dest != nullptr) {
            s = Scatter(scratch, *item.scatter, item.dest);
          }
          if (s.ok()) {
            // Read repair: the copies found bad get these good bytes (the
            // servers marked them on the read, so the puts rewrite them).
            if (!a->bad.empty()) {
              std::string where;
              for (ServerConn* b : a->bad) {
                absl::StrAppend(&where, where.empty() ? "" : ", ", b->address);
              }
              PutCopies(
                  a->id, dest, raw, a->bad,
                  [id = a->id, where](const Status& st) {
                    if (st.ok()) {
                      log::Info("stagger",
                                absl::StrCat("repaired chunk ", id.ToHex(),
                                             " on ", where));
                    } else {
                      log::Warning(
                          "stagger",
                          absl::StrCat("repair of chunk ", id.ToHex(), " on ",
                                       where, " failed: ", st.message()));
                    }
                  });
            }
            a->finish(s);
          } else {
            failed(s);
          }
        });
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
  if (s.ok()) s = format::VerifyPayload(r->record, msg.payload.view());
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
    STAGGER_RETURN_IF_ERROR(
        WithContext(got, absl::StrCat("delta base ", base_id.ToHex())));
  }
  std::string below, above;
  if (chain.size() > 1) {
    below.resize(raw_length);
    above.resize(raw_length);
  }
  for (size_t i = chain.size(); i-- > 0;) {
    const Link& l = chain[i];
    char* dest = i == 0 ? out : above.data();
    if (i + 1 == chain.size()) {
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
  STAGGER_RETURN_IF_ERROR(WithContext(
      header.status(),
      absl::StrCat("chunk ", id.ToHex(), " from server ", server.address)));
  return std::make_pair(*header, std::move(*reply));
}

}  // namespace stagger::client
