// DataService over the in-process transport, with real stores in a temp dir.
#include "server/data_service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "format/codec.h"
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "format/record.h"
#include "server/tier/layout.h"
#include "server/tier/memory_object_store.h"
#include "transport/inproc_transport.h"

namespace stagger::server {
namespace {

using format::DataOp;

class DataServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stagger-ds-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    meta_ = *MetaStore::Open((dir_ / "meta").string());
    SegmentStoreOptions so;
    so.dir = (dir_ / "segments").string();
    segments_ = *SegmentStore::Open(so);
    ingest_ = std::make_unique<Executor>(2);
    readers_ = std::make_unique<Executor>(2);
    service_ = std::make_unique<DataService>(segments_.get(), meta_.get(),
                                             ingest_.get(), readers_.get());
    transport_ = transport::NewInProcTransport();
    listener_ = *transport_->Listen("inproc:", service_.get());
    conn_ = *transport_->Connect(listener_->address());
  }
  void TearDown() override {
    conn_.reset();
    listener_.reset();
    // The stores run their last callbacks (which reply through the service)
    // before the service goes.
    readers_.reset();
    ingest_.reset();
    segments_.reset();
    service_.reset();
    meta_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Sends a PutChunk of `raw` (raw codec); returns the reply status.
  Status Put(const std::string& job, const std::string& raw,
             bool corrupt_crc = false, bool in_memory = false) {
    format::PutChunkRequest req;
    req.job = job;
    req.in_memory = in_memory;
    req.record.codec = format::Codec::kRaw;
    req.record.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
    req.record.raw_length = req.record.encoded_length = raw.size();
    req.record.payload_crc32c =
        format::Crc32c(raw.data(), raw.size()) ^ (corrupt_crc ? 1 : 0);
    return ReplyOf(conn_->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                   format::EncodePutChunk(req), raw));
  }

  // Sends a PutChunk of `raw` stored as `payload` in `codec`.
  Status PutEncoded(const std::string& job, const std::string& raw,
                    format::Codec codec, const std::string& payload) {
    format::PutChunkRequest req;
    req.job = job;
    req.record.codec = codec;
    req.record.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
    req.record.raw_length = raw.size();
    req.record.encoded_length = payload.size();
    req.record.payload_crc32c = format::Crc32c(payload.data(), payload.size());
    return ReplyOf(conn_->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                   format::EncodePutChunk(req), payload));
  }

  // A GetRange of chunk `id`: the bytes, or the reply's error.
  Result<std::string> Range(const format::ChunkId& id, uint64_t offset,
                            uint64_t length) {
    return Parts(id, {{offset, length}});
  }
  Result<std::string> Parts(const format::ChunkId& id,
                            std::vector<format::ChunkPart> parts) {
    auto m = conn_->CallSync(static_cast<uint16_t>(DataOp::kGetRange),
                             format::EncodeGetRange({"job", id, parts}), "");
    STAGGER_RETURN_IF_ERROR(m.status());
    STAGGER_ASSIGN_OR_RETURN(format::RangeReply r,
                             format::DecodeRangeReply(m->header));
    STAGGER_RETURN_IF_ERROR(r.status);
    EXPECT_EQ(r.crc32c, format::Crc32c(m->payload.data(), m->payload.size()));
    return std::string(m->payload.view());
  }

  static Status ReplyOf(const Result<transport::Message>& m) {
    if (!m.ok()) return m.status();
    auto r = format::DecodeReply(m->header);
    return r.ok() ? r->status : r.status();
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<SegmentStore> segments_;
  std::unique_ptr<Executor> ingest_;
  std::unique_ptr<Executor> readers_;
  std::unique_ptr<MemoryTier> tier_;  // outlives the service
  std::unique_ptr<DataService> service_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<transport::Connection> conn_;
};

TEST_F(DataServiceTest, PutThenGetReturnsTheSameRecord) {
  std::string raw(100000, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(Put("job", raw).ok());
  auto id = format::ChunkId::Of(raw.data(), raw.size());
  auto reply = conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                               format::EncodeGetChunk({"job", id}), "");
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto r = format::DecodeReply(reply->header);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->status.ok()) << r->status;
  ASSERT_TRUE(r->has_record);
  EXPECT_EQ(r->record.chunk_id, id);
  EXPECT_EQ(reply->payload.view(), raw);
  EXPECT_EQ(service_->counters().chunks_written.load(), 1u);
  // Same bytes again: acknowledged without a second write.
  ASSERT_TRUE(Put("job", raw).ok());
  EXPECT_EQ(service_->counters().chunks_written.load(), 1u);
  EXPECT_EQ(service_->counters().chunks_deduplicated.load(), 1u);
  // Another job does not see this job's chunks.
  auto other = conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                               format::EncodeGetChunk({"other", id}), "");
  EXPECT_EQ(ReplyOf(other).code(), absl::StatusCode::kNotFound);
}

// A copy found bad on read is marked: the next put of the chunk rewrites
// it (a client's repair) instead of being taken as already durable.
// A put makes the service busy for the drain to the cold tier, and it is
// quiet again kClientQuiet after the last request was answered.
TEST_F(DataServiceTest, ClientTrafficLastsUntilTheRequestsGoQuiet) {
  absl::SleepFor(DataService::kClientQuiet * 2);
  EXPECT_FALSE(service_->ClientTraffic());
  ASSERT_TRUE(Put("job", std::string(100000, 'x')).ok());
  EXPECT_TRUE(service_->ClientTraffic());
  absl::SleepFor(DataService::kClientQuiet * 2);
  EXPECT_FALSE(service_->ClientTraffic());
}

// A chunk only the cold tier holds is served whatever GetChunk's size hint
// says: none (a stat first), exact, short (read again whole), or absurd
// (ignored, never an allocation of that size).
TEST_F(DataServiceTest, ColdChunksAreServedWhateverTheSizeHint) {
  tier::MemoryObjectStore cold;
  service_->SetColdStore(&cold);
  const std::string raw(50000, 'c');
  format::RecordHeader h;
  h.codec = format::Codec::kRaw;
  h.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
  h.raw_length = h.encoded_length = raw.size();
  h.payload_crc32c = format::Crc32c(raw.data(), raw.size());
  std::string record(format::RecordSize(raw.size()), '\0');
  format::EncodeRecord(h, raw, record.data());
  record.resize(format::kRecordHeaderSize + raw.size());  // as drained
  ASSERT_TRUE(cold.Put(tier::ChunkObject("job", h.chunk_id), record).ok());
  for (uint64_t hint : {uint64_t{0}, uint64_t{record.size()},
                        uint64_t{format::kRecordHeaderSize + 1}, uint64_t{3},
                        uint64_t{1} << 62}) {
    auto reply =
        conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                        format::EncodeGetChunk({"job", h.chunk_id, hint}), "");
    ASSERT_TRUE(reply.ok()) << reply.status();
    auto r = format::DecodeReply(reply->header);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->status.ok()) << "hint " << hint << ": " << r->status;
    EXPECT_EQ(reply->payload.view(), raw) << "hint " << hint;
  }
}

TEST_F(DataServiceTest, PutRepairsAChunkFoundBadOnRead) {
  std::string raw(50000, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 13);
  ASSERT_TRUE(Put("job", raw).ok());
  const auto id = format::ChunkId::Of(raw.data(), raw.size());
  auto get = [&] {
    return conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                           format::EncodeGetChunk({"job", id}), "");
  };
  {
    // Flip one payload byte of the only record (after its 64-byte header).
    const auto seg = dir_ / "segments" / "job" / "00000001.seg";
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << seg;
    f.seekg(64 + 1000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x20);
    f.seekp(64 + 1000);
    f.write(&c, 1);
  }
  EXPECT_EQ(ReplyOf(get()).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(service_->counters().verify_failures.load(), 1u);
  EXPECT_TRUE(meta_->IsMarkedBad("job", id));
  ASSERT_TRUE(Put("job", raw).ok());
  EXPECT_EQ(service_->counters().chunks_written.load(), 2u);
  EXPECT_EQ(service_->counters().chunks_deduplicated.load(), 0u);
  EXPECT_FALSE(meta_->IsMarkedBad("job", id));
  auto reply = get();
  ASSERT_TRUE(ReplyOf(reply).ok()) << ReplyOf(reply);
  EXPECT_EQ(reply->payload.view(), raw);
  // Intact again: the next put is a duplicate.
  ASSERT_TRUE(Put("job", raw).ok());
  EXPECT_EQ(service_->counters().chunks_deduplicated.load(), 1u);
}

// GetRange decodes on the server (zstd, a delta through its base) and
// sends only the part asked for, with its CRC.
TEST_F(DataServiceTest, RangesOfEncodedAndDeltaChunks) {
  std::string base(300000, '\0'), next;
  for (size_t i = 0; i < base.size(); ++i) {
    base[i] = static_cast<char>((i / 4) % 251);
  }
  next = base;
  for (size_t i = 0; i < next.size(); i += 97) next[i] ^= 0x5a;
  const auto base_id = format::ChunkId::Of(base.data(), base.size());
  const auto next_id = format::ChunkId::Of(next.data(), next.size());
  std::string zstd, delta;
  auto c = format::Encode(format::Codec::kZstd, base, &zstd);
  ASSERT_TRUE(c.ok() && *c == format::Codec::kZstd);
  ASSERT_LT(zstd.size(), base.size() / 4);
  format::EncodeOptions o;
  o.element_size = 4;
  auto d = format::EncodeDelta(next, base, base_id, &delta, o);
  ASSERT_TRUE(d.ok() && format::IsDelta(*d)) << d.status();
  ASSERT_TRUE(PutEncoded("job", base, format::Codec::kZstd, zstd).ok());
  ASSERT_TRUE(PutEncoded("job", next, *d, delta).ok());

  for (auto [offset, length] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 1}, {1000, 70000}, {299999, 1}, {0, 300000}}) {
    auto got = Range(base_id, offset, length);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == base.substr(offset, length)) << offset;
    got = Range(next_id, offset, length);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == next.substr(offset, length)) << offset;
  }
  EXPECT_EQ(service_->counters().ranges_read.load(), 8u);
  EXPECT_EQ(service_->counters().bytes_read.load(),
            2 * (1 + 70000 + 1 + 300000));

  // Several parts come back one after another.
  auto parts = Parts(next_id, {{5, 10}, {200000, 3}, {0, 2}});
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_TRUE(*parts ==
              next.substr(5, 10) + next.substr(200000, 3) + next.substr(0, 2));
  EXPECT_EQ(Range(base_id, 299999, 2).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Parts(base_id, {{0, 1}, {299999, 2}}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Range(format::ChunkId{1, 2}, 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->counters().bad_requests.load(), 2u);
}

// A range of a chunk whose stored copy is bad: DATA_LOSS, and the copy is
// marked for repair as a GetChunk marks it.
TEST_F(DataServiceTest, RangeOfABadCopyIsDataLossAndMarksIt) {
  std::string raw(50000, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 13);
  ASSERT_TRUE(Put("job", raw).ok());
  const auto id = format::ChunkId::Of(raw.data(), raw.size());
  {
    const auto seg = dir_ / "segments" / "job" / "00000001.seg";
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << seg;
    f.seekp(64 + 40000);
    f.put('\x7f');
  }
  // The range asked for is intact; the chunk as a whole is not.
  auto got = Range(id, 0, 100);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find(id.ToHex()), std::string::npos)
      << got.status();
  EXPECT_EQ(service_->counters().verify_failures.load(), 1u);
  EXPECT_TRUE(meta_->IsMarkedBad("job", id));
}

TEST_F(DataServiceTest, BadRequestsGetErrorsAndNothingIsWritten) {
  EXPECT_EQ(Put("job", "payload", /*corrupt_crc=*/true).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReplyOf(conn_->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                    "\x03garbage", "x"))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplyOf(conn_->CallSync(999, "", "")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReplyOf(conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk), "", ""))
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->counters().bad_requests.load(), 4u);
  EXPECT_EQ(service_->counters().chunks_written.load(), 0u);
  // Still serving.
  EXPECT_TRUE(Put("job", "fine").ok());
}

TEST_F(DataServiceTest, StopAcceptingRefusesNewRequests) {
  ASSERT_TRUE(Put("job", "before").ok());
  service_->StopAccepting();
  service_->WaitIdle();
  Status s = Put("job", "after");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("shutting down"), std::string::npos);
}

TEST_F(DataServiceTest, MemoryPutsAreServedFromMemoryAndWrittenBehind) {
  // Nothing is written until asked.
  tier_ = std::make_unique<MemoryTier>(1 << 20, absl::Hours(1));
  MemoryTier& tier = *tier_;
  service_->SetMemoryTier(&tier, nullptr);
  std::string a(100000, '\0');
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>(i * 13);
  const auto id_a = format::ChunkId::Of(a.data(), a.size());
  ASSERT_TRUE(Put("job", a, false, /*in_memory=*/true).ok());
  EXPECT_TRUE(absl::IsNotFound(meta_->GetChunk("job", id_a).status()))
      << "acknowledged before it is on disk";
  auto got = conn_->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                             format::EncodeGetChunk({"job", id_a}), "");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(ReplyOf(got).ok());
  EXPECT_EQ(got->payload.view(), a);
  EXPECT_EQ(tier.stats().reads_total, 1u);
  // A range of it is not served from memory: the reader takes it whole.
  EXPECT_TRUE(absl::IsNotFound(Range(id_a, 0, 10).status()));
  // Bigger than the tier: stored (and acknowledged) as a plain put.
  std::string b(2 << 20, 'b');
  ASSERT_TRUE(Put("job", b, false, /*in_memory=*/true).ok());
  EXPECT_TRUE(
      meta_->GetChunk("job", format::ChunkId::Of(b.data(), b.size())).ok());
  EXPECT_EQ(tier.stats().refused_total, 1u);
  // A bad checksum is refused, and nothing is held.
  EXPECT_EQ(
      Put("job", "other", /*corrupt_crc=*/true, /*in_memory=*/true).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier.stats().chunks, 1u);
  // Shutdown writes what is held; then it reads from disk like any chunk.
  ASSERT_TRUE(service_->FinishWriteBehind(absl::Seconds(30)).ok());
  auto meta = meta_->GetChunk("job", id_a);
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto rec = segments_->Read("job", meta->location);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->payload.view(), a);
  EXPECT_EQ(tier.stats().memory_only_bytes, 0u);
}

}  // namespace
}  // namespace stagger::server
