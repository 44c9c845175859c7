// Chunk I/O over the data plane: encode and put chunks, fetch and decode
// them, with a bounded number in flight. CPU work (hashing, compression,
// decompression, verification) runs on an executor, never on the
// transport's progress thread.
//
// Every fetched chunk is verified end to end: the record checksum, the
// decoded length, and the xxh3 fingerprint of the decoded bytes against the
// chunk id. A mismatch is DATA_LOSS naming the chunk and the server. When
// another server then returns good bytes, they are put back to the servers
// that returned bad ones (read repair).
//
// Puts are defined in chunk_put.cc, fetches in chunk_io.cc.
//
// Thread-safety: ChunkIo is thread-safe; each call blocks its caller.
#ifndef STAGGER_CLIENT_CHUNK_IO_H_
#define STAGGER_CLIENT_CHUNK_IO_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/codec_policy.h"
#include "client/sender.h"
#include "client/server_set.h"
#include "client/shaping.h"
#include "format/codec.h"
#include "format/data_plane.h"
#include "format/manifest.pb.h"
#include "format/slice.h"
#include "util/executor.h"

namespace stagger::client {

struct PutStats {
  std::atomic<uint64_t> bytes_raw{0};
  std::atomic<uint64_t> bytes_shipped{0};
  std::atomic<uint64_t> chunks{0};
  std::atomic<uint64_t> chunks_unchanged{0};
  // By format::Codec value.
  std::atomic<uint64_t> codec_chunks[format::kCodecCount] = {};
  // Shipped chunks by the reason they went out encoded or raw.
  std::atomic<uint64_t> codec_reasons[kCodecReasons] = {};
  // Changed chunks with a previous version whose bytes were not held.
  std::atomic<uint64_t> chunks_no_base{0};
};

// The previous version of a chunk, to encode the new one as a delta.
struct DeltaBase {
  std::shared_ptr<const std::string> bytes;
  format::ChunkId id;
};

// One chunk to put (ChunkIo::PutAsync).
struct PutRequest {
  // Every server, ranked for the chunk's slot; it goes to the first
  // `replicas` that are up. Not owned; valid for the call.
  const std::vector<ServerConn*>* ranked = nullptr;
  size_t replicas = 1;
  const char* data = nullptr;
  size_t len = 0;
  // The chunk's fingerprint and the CRC32C of `data` (both from
  // ChunkId::Of(data, len, &crc32c)).
  format::ChunkId id;
  uint32_t crc32c = 0;
  // The tensor's element width when it holds floating point numbers (byte
  // grouping pays), else 0.
  int element_size = 0;
  // With a delta base, the chunk goes as a delta against it when that is
  // smaller (ref->base_id is then set).
  const DeltaBase* delta = nullptr;
  // The same tensor's chunk in the last save (known even where its bytes
  // are not held): a whole put names it to servers that take it
  // (ServerConn::takes_previous), which may store it as a delta of this one.
  std::optional<format::ChunkId> previous;
  pb::ChunkRef* ref = nullptr;  // filled: id, lengths, codec, base
  PutStats* stats = nullptr;    // counted into
  // A save with durability "memory": servers with a memory tier may
  // acknowledge the copy once it is in their RAM.
  bool in_memory = false;
};

struct FetchItem {
  const pb::ChunkRef* ref = nullptr;
  char* dest = nullptr;  // raw_length bytes; nullptr = verify only
  // Where the chunk may live, in the order to try (ServerSet::ForSlot):
  // servers marked down are skipped; one that fails or returns bad bytes
  // is followed by the next.
  std::vector<ServerConn*> servers;
  // With `scatter` (not owned): the chunk is decoded into scratch memory and
  // each run copies `length` bytes at `src` to `dest` + `dst`; `dest` is then
  // the base of the destination buffer.
  const std::vector<format::CopyRun>* scatter = nullptr;
  // With `scatter` and `parts`: the runs read only these parts of the
  // chunk's decoded bytes (increasing, disjoint). A server that serves
  // ranges (ServerConn::serves_ranges) sends those alone, decoded and
  // checked against the chunk id on its side, with a CRC-32C checked here;
  // where it cannot (the chunk only in its cold tier, a bad copy), or from
  // other servers, the whole chunk is fetched as usual.
  std::vector<format::ChunkPart> parts;
};

class ChunkIo {
 public:
  // None owned.
  // With CodecChoice::kAuto and a `policy`, each chunk is encoded or sent
  // raw as the policy says (CodecPolicy::Decide, told whether the save is
  // paced and whether training marks collectives, from `shaping`), and the
  // policy is fed encode and wire timings. With kAuto, an encoding that
  // saves less than CodecPolicy::kMinGain goes raw.
  // With `shaping`, puts go on the wire as its QoS allows (sender.h).
  // `executor` decodes fetched chunks (and fetches a delta's bases, which
  // blocks its thread): DefaultFetchThreads() threads suit it.
  ChunkIo(Executor* executor, std::string job, CodecChoice codec,
          format::EncodeOptions encode, size_t max_inflight,
          CodecPolicy* policy = nullptr, Shaping* shaping = nullptr);
  // Twice the cores, 4 to 16: decoding is CPU work, a delta's base fetch
  // waits on the network.
  static int DefaultFetchThreads();

  // With `servers` (not owned) whose wait() is above zero: a put whose
  // every server turned out gone, each copy's other servers down too, is
  // not failed at once. One of the executor's threads waits up to wait()
  // for one more server of the set to be up (ServerSet::AwaitUp re-dials
  // them: a connection that broke under a burst of new connections, a
  // server restarting) and the copy goes to the first of its ranking that
  // is up; only then does it fail. Once per put.
  void SetServers(ServerSet* servers) { servers_ = servers; }

  // Encodes `r.len` bytes at `r.data` on the calling thread, fills
  // `r.ref`, and queues the chunk for the first `r.replicas` servers of
  // `r.ranked` that are up; at most max_inflight puts are on the wire, the
  // rest wait in order. A copy whose server turns out gone (IsServerGone)
  // marks it down and goes to the next server of `r.ranked` instead.
  // `encoded(still_in_use)` runs before this returns: when `still_in_use`
  // is false the put no longer reads `r.data` (it was encoded into a
  // buffer of its own). `done` runs once with the outcome, after every
  // copy was acknowledged durable (UNAVAILABLE naming the servers down
  // when fewer than `r.replicas` servers are left), on a transport thread.
  // `r.data` must stay valid until `done` when in use.
  void PutAsync(const PutRequest& r, const std::function<void(bool)>& encoded,
                std::function<void(const Status&)> done);

  // Puts a copy of chunk `id` (`len` decoded bytes, copied here first) on
  // every server of `servers`, as PutAsync does; `done` runs once with the
  // outcome. Repairs use it: a server that marked its copy bad rewrites it.
  void PutCopies(const format::ChunkId& id, const char* bytes, size_t len,
                 std::vector<ServerConn*> servers,
                 std::function<void(const Status&)> done);

  // Fetches, verifies and decodes every item. `on_result` (optional) is
  // called once per item with its outcome, from executor threads. Returns the
  // first error (all items are attempted when `on_result` is given;
  // otherwise the first error stops issuing new fetches). `on_fetched`
  // (optional) gets the raw bytes of each item fetched intact, from
  // executor threads (progress reports). Once `*cancel` (optional) is true,
  // no new fetch is issued and the result is CANCELLED after those in
  // flight have finished.
  Status Fetch(const std::vector<FetchItem>& items,
               const std::function<void(size_t, const Status&)>& on_result,
               const std::function<void(uint64_t)>& on_fetched = nullptr,
               const std::atomic<bool>* cancel = nullptr);

 private:
  struct FetchAttempt;
  struct PutState;
  // Asks the next server of the attempt for its chunk.
  void FetchFrom(std::shared_ptr<FetchAttempt> a);
  // Where a whole-chunk reply for a direct item (one contiguous run) may
  // land: its destination, when the reply carries the chunk raw.
  static transport::ReplyInto IntoDestination(const format::ChunkId& id,
                                              const FetchItem& item);
  // Asks `server` for the item's range; on any failure asks it for the
  // whole chunk instead (FetchFrom).
  void FetchRange(std::shared_ptr<FetchAttempt> a, ServerConn* server,
                  transport::Connection& data);
  // Checks a GetRange reply for the item of `a` and scatters its bytes.
  static Status ScatterRange(const FetchAttempt& a,
                             const transport::Message& msg);
  // Decodes `msg`, the chunk of `a` as `server` sent it, into the item's
  // place (scattered when it maps to several runs), and has the copies
  // found bad before it rewritten.
  Status DecodeFetched(const FetchAttempt& a, ServerConn* server,
                       const transport::Message& msg);
  // Puts a good copy of a chunk on the servers that answered with a bad
  // one (they marked theirs on the read), logging the outcome.
  void RepairBadCopies(const format::ChunkId& id, const char* bytes, size_t len,
                       const std::vector<ServerConn*>& bad);
  // Sends one copy of a put to `server`.
  void SendCopy(std::shared_ptr<PutState> st, ServerConn* server);
  // SetServers: waits for a server to come back, then sends the copy
  // `server` lost to the first of the put's ranking that is up, or fails
  // the put with `fail`.
  void ResendAfterWait(std::shared_ptr<PutState> st, ServerConn* server,
                       Status fail);
  // The codec the chunk of `r` should have, and why (CodecPolicy for
  // "auto"; `may_delta`: it may be sent as a delta of its previous version).
  std::pair<format::Codec, CodecReason> ChooseCodec(const PutRequest& r,
                                                    bool may_delta) const;
  // Encodes `r`'s bytes as `want` (a delta first when `may_delta`) into
  // `st`'s payload and `req`'s codec, or keeps them raw when that saves too
  // little (`reason` becomes no_gain); the codec's error otherwise.
  Status EncodeInto(const PutRequest& r, format::Codec want, bool may_delta,
                    PutState* st, format::PutChunkRequest* req,
                    CodecReason* reason);
  // Fetches the record of chunk `id` synchronously from `server`, checked
  // (CheckReply), not decoded.
  Result<std::pair<format::RecordHeader, transport::Message>> FetchRecord(
      ServerConn* server, const format::ChunkId& id, size_t raw_length);
  // The record header of a GetChunk reply, once the reply is found to be
  // of chunk `id` (raw_length bytes) with a payload of the header's length,
  // an encoded one intact by its CRC (a raw one is checked against the
  // chunk id when decoded: DecodeReply).
  static Result<format::RecordHeader> CheckReply(const format::ChunkId& id,
                                                 size_t raw_length,
                                                 const transport::Message& msg);
  // Verifies and decodes a GetChunk reply for chunk `id` from `server` into
  // `out`, following delta bases (at most `depth_left` links): each from
  // the same server, else from one of `others`.
  Status DecodeReply(ServerConn* server, const format::ChunkId& id,
                     size_t raw_length, const transport::Message& msg,
                     char* out, int depth_left,
                     const std::vector<ServerConn*>& others);

  Executor* executor_;
  std::string job_;
  // The codec for a chunk of a tensor with this float element width (0:
  // not floating point).
  format::Codec CodecFor(int element_size) const;
  CodecChoice codec_;
  format::EncodeOptions encode_;
  size_t max_inflight_;
  CodecPolicy* policy_;
  Shaping* shaping_;
  ServerSet* servers_ = nullptr;
  Sender sender_;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CHUNK_IO_H_
