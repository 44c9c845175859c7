// ChunkIo's put side: encoding a chunk (raw, byte-grouped zstd or a delta
// against its previous version, as CodecPolicy decides for "auto") and
// sending its copies to the servers of its slot, failing over to the next
// server when one is gone. The fetch side is in chunk_io.cc.
#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/chunk_io.h"  // ChunkIo: declared there, put side here
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "qos/clock.h"
#include "util/log.h"

namespace stagger::client {
namespace {

int64_t NowNs() { return qos::RealClock::Get()->NowNs(); }

// CPU time the calling thread has used, seconds.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

format::Codec ChunkIo::CodecFor(int element_size) const {
  bool floats = element_size == 2 || element_size == 4 || element_size == 8;
  if (codec_ == CodecChoice::kRaw) return format::Codec::kRaw;
  if (codec_ == CodecChoice::kZstd) return format::Codec::kZstd;
  // kAuto and kByteGroupZstd: grouping only means something for floats.
  return floats ? format::Codec::kByteGroupZstd : format::Codec::kZstd;
}

// One chunk's put: its encodings and the copies still owed.
struct ChunkIo::PutState {
  std::vector<ServerConn*> ranked;
  size_t home = 0;  // ranked[0, home) hold every version of the slot
  format::PutChunkRequest req;  // the put (maybe a delta)
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
  bool waited ABSL_GUARDED_BY(mu) = false;  // ResendAfterWait ran
  std::function<void(const Status&)> done;
};

namespace {

// The servers a chunk's copies go to: the first `replicas` of its ranking
// that are up; UNAVAILABLE naming the servers down when fewer are.
Result<std::vector<ServerConn*>> CopyTargets(
    const std::vector<ServerConn*>& ranked, size_t replicas,
    const format::ChunkId& id) {
  std::vector<ServerConn*> targets;
  for (ServerConn* s : ranked) {
    if (targets.size() < replicas && !s->down) targets.push_back(s);
  }
  if (targets.size() == replicas) return targets;
  std::string down;
  for (ServerConn* s : ranked) {
    if (s->down) absl::StrAppend(&down, down.empty() ? "" : ", ", s->address);
  }
  return absl::UnavailableError(
      absl::StrCat("chunk ", id.ToHex(), " needs ", replicas,
                   " copies but only ", targets.size(), " of ", ranked.size(),
                   " servers are up (down: ", down, ")"));
}

}  // namespace

std::pair<format::Codec, CodecReason> ChunkIo::ChooseCodec(
    const PutRequest& r, bool may_delta) const {
  format::Codec want = CodecFor(r.element_size);
  if (policy_ == nullptr || want == format::Codec::kRaw) {
    return {want, CodecReason::kFixed};
  }
  ChunkFacts facts;
  facts.paced = shaping_ != nullptr && shaping_->Paced();
  if (facts.paced) facts.pace_Bps = shaping_->PaceBps();
  facts.training = shaping_ != nullptr && shaping_->TrainingMarked();
  if (may_delta && (facts.paced || !facts.training)) {
    facts.xor_zero_fraction =
        XorZeroFraction(r.data, r.delta->bytes->data(), r.len);
  }
  const CodecDecision d = policy_->Decide(facts);
  return {d.encode ? want : format::Codec::kRaw, d.reason};
}

Status ChunkIo::EncodeInto(const PutRequest& r, format::Codec want,
                           bool may_delta, PutState* st,
                           format::PutChunkRequest* req, CodecReason* reason) {
  const std::string_view data(r.data, r.len);
  const int64_t encode_start_ns = NowNs();
  const double cpu_start_s = ThreadCpuSeconds();
  if (may_delta && want != format::Codec::kRaw) {
    auto owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    // Plain "zstd" keeps its bytes ungrouped in deltas too.
    eo.element_size = (r.element_size > 0 && codec_ != CodecChoice::kZstd)
                          ? r.element_size
                          : 1;
    // The numeric delta only where every home server can store it.
    for (size_t i = 0; i < st->home; ++i) {
      if (st->ranked[i]->codec_count.load() <=
          static_cast<uint32_t>(format::Codec::kNumDeltaByteGroupZstd)) {
        eo.numeric_delta = false;
      }
    }
    auto codec = format::EncodeDelta(data, *r.delta->bytes, r.delta->id,
                                     owned.get(), eo);
    if (codec.ok() && format::IsDelta(*codec)) {
      st->owned = std::move(owned);
      st->delta = true;
      req->record.codec = *codec;
      st->payload = *st->owned;
      r.ref->set_base_id(r.delta->id.ToBytes());
    }
  }
  if (st->owned != nullptr) {
    // Encoded as a delta above.
  } else if (want == format::Codec::kRaw) {
    st->payload = data;  // sent straight from staging
    req->record.codec = format::Codec::kRaw;
  } else {
    st->owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    eo.element_size = r.element_size;
    STAGGER_ASSIGN_OR_RETURN(req->record.codec,
                             format::Encode(want, data, st->owned.get(), eo));
    st->payload = *st->owned;
  }
  if (policy_ != nullptr && want != format::Codec::kRaw) {
    policy_->OnEncoded(r.len, st->payload.size(),
                       (NowNs() - encode_start_ns) * 1e-9);
    if (shaping_ != nullptr && shaping_->LowPriority()) {
      policy_->OnIdleCpu(ThreadCpuSeconds() - cpu_start_s);
    }
  }
  if (st->owned != nullptr && codec_ == CodecChoice::kAuto &&
      st->payload.size() > (1 - CodecPolicy::kMinGain) * r.len) {
    // Too little saved to be worth a decode at every load: raw.
    st->owned.reset();
    st->delta = false;
    r.ref->clear_base_id();
    st->payload = data;
    req->record.codec = format::Codec::kRaw;
    *reason = CodecReason::kNoGain;
  }
  return absl::OkStatus();
}

void ChunkIo::PutAsync(const PutRequest& r,
                       const std::function<void(bool)>& encoded,
                       std::function<void(const Status&)> done) {
  auto targets = CopyTargets(*r.ranked, r.replicas, r.id);
  if (!targets.ok()) {
    encoded(false);
    done(targets.status());
    return;
  }
  auto st = std::make_shared<PutState>();
  st->ranked = *r.ranked;
  st->home = std::min(r.replicas, st->ranked.size());
  // A delta is stored only where its base is: on the slot's home servers.
  bool home_up = true;
  for (size_t i = 0; i < st->home; ++i) {
    home_up = home_up && !st->ranked[i]->down;
  }
  const bool may_delta = r.delta != nullptr && home_up;
  format::PutChunkRequest req;
  req.job = job_;
  req.record.chunk_id = r.id;
  req.record.raw_length = r.len;
  auto [want, reason] = ChooseCodec(r, may_delta);
  if (Status s = EncodeInto(r, want, may_delta, st.get(), &req, &reason);
      !s.ok()) {
    encoded(false);
    done(s);
    return;
  }
  // A delta keeps its raw bytes while a copy may still have to go to a
  // server outside the home ones.
  const bool keep_data =
      st->owned == nullptr || (st->delta && st->ranked.size() > st->home);
  encoded(keep_data);
  if (st->delta && keep_data) {
    st->data = r.data;
    st->len = r.len;
    st->raw_req = req;
    st->raw_req.record.codec = format::Codec::kRaw;
    st->raw_req.record.encoded_length = r.len;
    st->raw_req.record.payload_crc32c = r.crc32c;
  }
  req.record.encoded_length = st->payload.size();
  // Raw, the payload is `data`, whose checksum came with its fingerprint.
  req.record.payload_crc32c =
      st->owned == nullptr
          ? r.crc32c
          : format::Crc32c(st->payload.data(), st->payload.size());
  r.ref->set_id(req.record.chunk_id.ToBytes());
  r.ref->set_raw_length(r.len);
  r.ref->set_codec(static_cast<uint32_t>(req.record.codec));
  r.ref->set_stored_length(st->payload.size());
  r.stats->bytes_raw += r.len;
  ++r.stats->chunks;
  ++r.stats->codec_chunks[static_cast<int>(req.record.codec)];
  ++r.stats->codec_reasons[static_cast<int>(reason)];
  req.in_memory = r.in_memory;
  st->raw_req.in_memory = r.in_memory;
  if (!st->delta && r.previous && codec_ != CodecChoice::kRaw) {
    // Whole: the server may turn the previous version into a delta of it
    // (not with the raw codec asked for: its bytes stay as they are).
    req.previous = r.previous;
    req.element_size = static_cast<uint8_t>(
        r.element_size == 2 || r.element_size == 4 || r.element_size == 8
            ? r.element_size
            : 1);
  }
  st->req = req;
  st->raw_bytes = r.len;
  st->hex = req.record.chunk_id.ToHex();
  st->stats = r.stats;
  st->done = std::move(done);
  {
    absl::MutexLock l(&st->mu);
    st->owed = targets->size();
    st->tried = *targets;
  }
  for (ServerConn* s : *targets) SendCopy(st, s);
}

void ChunkIo::SendCopy(std::shared_ptr<PutState> st, ServerConn* server) {
  SendItem p;
  p.server = server;
  const bool home = std::find(st->ranked.begin(), st->ranked.begin() + st->home,
                              server) != st->ranked.begin() + st->home;
  // The memory flag only for a server with a memory tier (others refuse
  // it; they store the chunk durably, which is more than was asked).
  auto encode = [server](format::PutChunkRequest req) {
    req.in_memory = req.in_memory && server->memory_tier.load();
    if (!server->takes_previous.load()) req.previous.reset();
    return format::EncodePutChunk(req);
  };
  if (st->delta && !home) {
    // Outside the home servers the base is missing: send the bytes whole.
    p.header = encode(st->raw_req);
    p.payload = std::string_view(st->data, st->len);
  } else {
    p.header = encode(st->req);
    p.payload = st->payload;
    p.owned = st->owned;
  }
  st->stats->bytes_shipped += p.payload.size();
  p.what = absl::StrCat("put chunk ", st->hex, " to server ", server->address);
  p.raw_bytes = st->raw_bytes;
  p.done = [this, st, server](const Status& s) {
    ServerConn* next = nullptr;
    Status fail;
    bool wait = false;
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
          wait = servers_ != nullptr &&
                 servers_->wait() > absl::ZeroDuration() && !st->waited;
          st->waited = st->waited || wait;
          st->finished = !wait;
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
    if (wait) {
      executor_->Submit(
          [this, st, server, fail] { ResendAfterWait(st, server, fail); });
      return;
    }
    st->done(fail);
  };
  sender_.Enqueue(std::move(p));
}

void ChunkIo::ResendAfterWait(std::shared_ptr<PutState> st, ServerConn* server,
                              Status fail) {
  size_t holding = 0;  // servers up with a copy acknowledged or on the way
  {
    absl::MutexLock l(&st->mu);
    for (ServerConn* c : st->tried) holding += c != server && !c->down;
  }
  servers_->AwaitUp(holding + 1, servers_->wait()).IgnoreError();
  ServerConn* next = nullptr;
  {
    absl::MutexLock l(&st->mu);
    for (ServerConn* c : st->ranked) {
      if (c->down) continue;
      if (c == server ||
          std::find(st->tried.begin(), st->tried.end(), c) == st->tried.end()) {
        next = c;
        break;
      }
    }
    if (next == nullptr) {
      st->finished = true;
    } else if (next != server) {
      st->tried.push_back(next);
    }
  }
  if (next == nullptr) {
    st->done(WithContext(
        fail,
        absl::StrCat("after waiting ", absl::FormatDuration(servers_->wait()),
                     " for a server to come back")));
    return;
  }
  log::Info("stagger",
            absl::StrCat("chunk ", st->hex, ": copy resent to server ",
                         next->address, " after ", server->address, " failed"));
  SendCopy(st, next);
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
  PutRequest r;
  r.ranked = &servers;
  r.replicas = servers.size();
  r.data = c->bytes.data();
  r.len = len;
  r.id = id;
  r.crc32c = format::Crc32c(bytes, len);
  r.ref = &c->ref;
  r.stats = &c->stats;
  PutAsync(
      r, [](bool) {},
      [c, done = std::move(done)](const Status& s) { done(s); });
}

}  // namespace stagger::client
