// DataService over the in-process transport, with real stores in a temp dir.
#include "server/data_service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "format/crc32c.h"
#include "format/data_plane.h"
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
    ingest_ = std::make_unique<qos::Executor>(2);
    readers_ = std::make_unique<qos::Executor>(2);
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
             bool corrupt_crc = false) {
    format::PutChunkRequest req;
    req.job = job;
    req.record.codec = format::Codec::kRaw;
    req.record.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
    req.record.raw_length = req.record.encoded_length = raw.size();
    req.record.payload_crc32c =
        format::Crc32c(raw.data(), raw.size()) ^ (corrupt_crc ? 1 : 0);
    return ReplyOf(conn_->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                   format::EncodePutChunk(req), raw));
  }

  static Status ReplyOf(const Result<transport::Message>& m) {
    if (!m.ok()) return m.status();
    auto r = format::DecodeReply(m->header);
    return r.ok() ? r->status : r.status();
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<SegmentStore> segments_;
  std::unique_ptr<qos::Executor> ingest_;
  std::unique_ptr<qos::Executor> readers_;
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

}  // namespace
}  // namespace stagger::server
