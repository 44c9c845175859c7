#include "client/chunk_io.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/internal/window.h"
#include "format/crc32c.h"
#include "format/data_plane.h"

namespace stagger::client {
namespace {

using client_internal::Window;
using format::DataOp;

// A delta chain longer than this is refused as corrupt (writers cap chains
// far below it); it also stops a cycle of bases.
constexpr int kMaxDeltaDepth = 64;

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
      sender_(max_inflight, policy_, shaping) {}

format::Codec ChunkIo::CodecFor(int element_size) const {
  bool floats = element_size == 2 || element_size == 4 || element_size == 8;
  if (codec_ == "raw") return format::Codec::kRaw;
  if (codec_ == "zstd") return format::Codec::kZstd;
  // "auto" and "bytegroup+zstd": grouping only means something for floats.
  return floats ? format::Codec::kByteGroupZstd : format::Codec::kZstd;
}

void ChunkIo::PutAsync(ServerConn* server, const char* data, size_t len,
                       const format::ChunkId& id, int element_size,
                       const DeltaBase* delta, pb::ChunkRef* ref,
                       PutStats* stats,
                       const std::function<void(bool)>& encoded,
                       std::function<void(const Status&)> done) {
  SendItem p;
  format::PutChunkRequest req;
  req.job = job_;
  req.record.chunk_id = id;
  req.record.raw_length = len;
  format::Codec want = CodecFor(element_size);
  if (policy_ != nullptr && !policy_->ShouldEncode()) {
    want = format::Codec::kRaw;  // encoding is the bottleneck just now
  }
  const int64_t encode_start_ns = NowNs();
  if (delta != nullptr && want != format::Codec::kRaw) {
    auto owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    // Plain "zstd" keeps its bytes ungrouped in deltas too.
    eo.element_size = (element_size > 0 && codec_ != "zstd") ? element_size : 1;
    auto codec = format::EncodeDelta(std::string_view(data, len), *delta->bytes,
                                     delta->id, owned.get(), eo);
    if (codec.ok() && *codec == format::Codec::kXorByteGroupZstd) {
      p.owned = std::move(owned);
      req.record.codec = *codec;
      p.payload = *p.owned;
      ref->set_base_id(delta->id.ToBytes());
    }
  }
  if (p.owned != nullptr) {
    // Encoded as a delta above.
  } else if (want == format::Codec::kRaw) {
    p.payload = std::string_view(data, len);  // sent straight from staging
    req.record.codec = format::Codec::kRaw;
  } else {
    p.owned = std::make_shared<std::string>();
    format::EncodeOptions eo = encode_;
    eo.element_size = element_size;
    auto codec =
        format::Encode(want, std::string_view(data, len), p.owned.get(), eo);
    if (!codec.ok()) {
      encoded(false);
      done(codec.status());
      return;
    }
    req.record.codec = *codec;
    p.payload = *p.owned;
  }
  if (policy_ != nullptr && want != format::Codec::kRaw) {
    policy_->OnEncoded(len, p.payload.size(),
                       (NowNs() - encode_start_ns) * 1e-9);
  }
  encoded(p.owned == nullptr);
  req.record.encoded_length = p.payload.size();
  req.record.payload_crc32c =
      format::Crc32c(p.payload.data(), p.payload.size());
  ref->set_id(req.record.chunk_id.ToBytes());
  ref->set_raw_length(len);
  ref->set_codec(static_cast<uint32_t>(req.record.codec));
  ref->set_stored_length(p.payload.size());
  stats->bytes_raw += len;
  stats->bytes_shipped += p.payload.size();
  ++stats->chunks;
  ++stats->codec_chunks[static_cast<int>(req.record.codec)];
  p.server = server;
  p.header = format::EncodePutChunk(req);
  p.what = absl::StrCat("put chunk ", req.record.chunk_id.ToHex(),
                        " to server ", p.server->address);
  p.raw_bytes = len;
  p.done = std::move(done);
  sender_.Enqueue(std::move(p));
}

Status ChunkIo::Fetch(
    const std::vector<FetchItem>& items,
    const std::function<void(size_t, const Status&)>& on_result,
    const std::function<void(uint64_t)>& on_fetched) {
  for (const FetchItem& item : items) {
    STAGGER_RETURN_IF_ERROR(
        format::ChunkId::FromBytes(item.ref->id()).status());
  }
  Window window(max_inflight_, /*stop_on_error=*/!on_result);
  for (size_t i = 0; i < items.size(); ++i) {
    const FetchItem& item = items[i];
    auto id = format::ChunkId::FromBytes(item.ref->id());
    if (!window.Acquire()) break;
    if (item.server == nullptr) {
      window.Release(absl::InternalError("fetch without a server"));
      continue;
    }
    ServerConn& server = *item.server;
    std::string what =
        absl::StrCat("chunk ", id->ToHex(), " from server ", server.address);
    const uint64_t raw = item.ref->raw_length();
    auto finish = [&window, &on_result, &on_fetched, i, raw,
                   what](const Status& s) {
      Status full = WithContext(s, what);
      if (full.ok() && on_fetched) on_fetched(raw);
      if (on_result) on_result(i, full);
      window.Release(full);
    };
    server.data->Call(
        static_cast<uint16_t>(DataOp::kGetChunk),
        format::EncodeGetChunk({job_, *id}), std::string_view(),
        [this, item, id = *id, finish](Result<transport::Message> reply) {
          if (!reply.ok()) {
            finish(reply.status());
            return;
          }
          // Decoding is CPU work: move it off the progress thread.
          auto msg = std::make_shared<transport::Message>(std::move(*reply));
          executor_->Submit([this, item, id, msg, finish] {
            const size_t raw = item.ref->raw_length();
            std::string scratch;
            char* dest = item.dest;
            if (dest == nullptr || item.scatter != nullptr) {
              scratch.resize(raw);
              dest = scratch.data();
            }
            Status s =
                DecodeReply(item.server, id, raw, *msg, dest, kMaxDeltaDepth);
            if (s.ok() && item.scatter != nullptr && item.dest != nullptr) {
              s = Scatter(scratch, *item.scatter, item.dest);
            }
            finish(s);
          });
        });
  }
  return window.Drain();
}

Status ChunkIo::DecodeReply(ServerConn* server, const format::ChunkId& id,
                            size_t raw_length, const transport::Message& msg,
                            char* out, int depth_left) {
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
  if (r->record.codec == format::Codec::kXorByteGroupZstd) {
    if (depth_left <= 0) {
      return absl::DataLossError("delta chain too long (a cycle?)");
    }
    STAGGER_ASSIGN_OR_RETURN(format::ChunkId base_id,
                             format::DeltaBase(msg.payload.view()));
    std::string base(raw_length, '\0');
    STAGGER_RETURN_IF_ERROR(WithContext(
        FetchSync(server, base_id, raw_length, base.data(), depth_left - 1),
        absl::StrCat("delta base ", base_id.ToHex())));
    STAGGER_RETURN_IF_ERROR(
        format::DecodeDelta(msg.payload.view(), base, out, raw_length));
  } else {
    STAGGER_RETURN_IF_ERROR(
        format::Decode(r->record.codec, msg.payload.view(), out, raw_length));
  }
  if (format::ChunkId::Of(out, raw_length) != id) {
    return absl::DataLossError("decoded bytes do not match chunk id");
  }
  return absl::OkStatus();
}

Status ChunkIo::FetchSync(ServerConn* server_conn, const format::ChunkId& id,
                          size_t raw_length, char* out, int depth_left) {
  ServerConn& server = *server_conn;
  auto reply = server.data->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                                     format::EncodeGetChunk({job_, id}),
                                     std::string_view());
  STAGGER_RETURN_IF_ERROR(reply.status());
  return WithContext(
      DecodeReply(server_conn, id, raw_length, *reply, out, depth_left),
      absl::StrCat("chunk ", id.ToHex(), " from server ", server.address));
}

}  // namespace stagger::client
