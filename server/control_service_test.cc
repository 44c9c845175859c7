// ControlService's LiveChunks and Sweep over a real gRPC channel: what a
// malformed sweep stream gets, and that it deletes nothing.
#include "server/control_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

namespace stagger::server {
namespace {

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stagger-cs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto m = MetaStore::Open(dir_.string());
    ASSERT_TRUE(m.ok()) << m.status();
    meta_ = std::move(*m);
    service_ = std::make_unique<ControlService>(meta_.get(), "inproc:x", "id");
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = pb::Stagger::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown();
    server_.reset();
    meta_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Indexes `n` old chunks of job `job`; returns their ids.
  std::vector<format::ChunkId> PutChunks(const std::string& job, int n) {
    std::vector<format::ChunkId> ids;
    for (int i = 0; i < n; ++i) {
      format::ChunkId id{static_cast<uint64_t>(i + 1), 5};
      ChunkMeta cm;
      cm.location = {1, static_cast<uint64_t>(i) * 4096, 4096};
      cm.raw_length = 4096;
      cm.stored_length = 100;
      cm.codec = format::Codec::kZstd;
      cm.written_unix_ms = 1;
      EXPECT_TRUE(meta_->PutChunk(job, id, cm).ok());
      ids.push_back(id);
    }
    return ids;
  }

  // Commits step 1 of job "j", one rank, tensor "t" of 4096 bytes in
  // chunk `id` (with a global shape when `global`).
  void CommitOne(const format::ChunkId& id, bool global) {
    pb::ShardManifest m;
    m.set_job("j");
    m.set_step(1);
    m.set_world_size(1);
    m.set_chunk_size(4096);
    auto* t = m.add_tensors();
    t->set_name("t");
    t->set_dtype("U8");
    t->add_shape(4096);
    if (global) {
      t->add_global_shape(4096);
      t->add_global_offset(0);
    }
    t->set_byte_size(4096);
    auto* c = t->add_chunks();
    c->set_id(id.ToBytes());
    c->set_raw_length(4096);
    auto committed = meta_->CommitShard(m);
    ASSERT_TRUE(committed.ok()) << committed.status();
  }

  // Streams `msgs` as one Sweep call; returns its status.
  grpc::Status Sweep(const std::vector<pb::SweepRequest>& msgs,
                     pb::SweepReply* reply) {
    grpc::ClientContext ctx;
    auto writer = stub_->Sweep(&ctx, reply);
    for (const auto& m : msgs) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  static pb::SweepRequest First(const std::string& job,
                                const std::vector<format::ChunkId>& ids) {
    pb::SweepRequest m;
    m.set_job(job);
    for (const auto& id : ids) m.add_live_ids(id.ToBytes());
    return m;
  }

  size_t Indexed(const std::string& job) {
    size_t n = 0;
    EXPECT_TRUE(meta_
                    ->ForEachChunk(job, [&](const format::ChunkId&,
                                            const ChunkMeta&) { ++n; })
                    .ok());
    return n;
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Stagger::Stub> stub_;
};

TEST_F(ControlServiceTest, SweepInSeveralMessagesDeletesTheRest) {
  auto ids = PutChunks("j", 10);
  pb::SweepRequest a = First("j", {ids[0], ids[1]});
  pb::SweepRequest b;
  b.add_live_ids(ids[2].ToBytes());
  b.set_last(true);
  b.set_total_ids(3);
  pb::SweepReply reply;
  grpc::Status s = Sweep({a, b}, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.chunks_deleted(), 7u);
  EXPECT_EQ(reply.bytes_freed(), 700u);
  EXPECT_FALSE(reply.has_compaction());  // no compactor here
  EXPECT_EQ(Indexed("j"), 3u);
}

TEST_F(ControlServiceTest, MalformedSweepsAreRefusedAndDeleteNothing) {
  auto ids = PutChunks("j", 4);
  auto expect = [&](std::vector<pb::SweepRequest> msgs, grpc::StatusCode code,
                    const std::string& words) {
    pb::SweepReply reply;
    grpc::Status s = Sweep(msgs, &reply);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos)
        << s.error_message();
    EXPECT_EQ(Indexed("j"), 4u);
  };
  // The stream ends without its last message (a client that died).
  expect({First("j", {ids[0]})}, grpc::StatusCode::ABORTED,
         "without its last message");
  pb::SweepRequest m = First("j", {ids[0]});
  m.set_last(true);
  m.set_total_ids(2);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "says 2 ids in all");
  m = First("j", {});
  m.add_live_ids(std::string(15, 'x'));
  m.set_last(true);
  m.set_total_ids(1);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "is 15 bytes, not 16");
  m = First("bad/job", {});
  m.set_last(true);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "invalid job name");
  m = First("j", {});
  m.set_grace_ms(-1);
  m.set_last(true);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "grace_ms must be >= 0");
  pb::SweepRequest second = First("j", {});
  second.set_last(true);
  expect({First("j", {}), second}, grpc::StatusCode::INVALID_ARGUMENT,
         "first only");
  pb::SweepRequest after = First("", {});
  after.clear_job();
  expect({[&] {
            pb::SweepRequest last = First("j", {});
            last.set_last(true);
            return last;
          }(),
          after},
         grpc::StatusCode::INVALID_ARGUMENT, "follows the last message");
  m = First("j", {});
  m.set_total_ids(3);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "last message only");
  m = First("j", {});
  for (int i = 0; i <= kMaxSweepIdsPerMessage; ++i) {
    m.add_live_ids(ids[0].ToBytes());
  }
  m.set_last(true);
  m.set_total_ids(kMaxSweepIdsPerMessage + 1);
  expect({m}, grpc::StatusCode::INVALID_ARGUMENT, "per message");
  expect({}, grpc::StatusCode::INVALID_ARGUMENT, "no message");
}

TEST_F(ControlServiceTest, SweepIsRefusedOnTheCoordinator) {
  auto ids = PutChunks("j", 2);
  ASSERT_NO_FATAL_FAILURE(CommitOne(ids[0], /*global=*/false));
  pb::SweepRequest only = First("j", {});
  only.set_last(true);
  pb::SweepReply reply;
  grpc::Status s = Sweep({only}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  EXPECT_EQ(Indexed("j"), 2u);
}

// GetStep with regions: the shard holding the region, and malformed
// regions refused naming what is wrong.
TEST_F(ControlServiceTest, RegionsFindTheirShardsAndBadOnesAreRefused) {
  auto ids = PutChunks("j", 1);
  ASSERT_NO_FATAL_FAILURE(CommitOne(ids[0], /*global=*/true));
  auto ask = [&](const std::vector<pb::TensorRegion>& regions,
                 pb::GetStepReply* reply) {
    pb::GetStepRequest req;
    req.set_job("j");
    req.set_step(1);
    for (const auto& r : regions) *req.add_regions() = r;
    grpc::ServerContext ctx;  // the handler itself, as the server calls it
    return service_->GetStep(&ctx, &req, reply);
  };
  pb::TensorRegion good;
  good.set_name("t");
  good.add_offset(100);
  good.add_shape(10);
  pb::GetStepReply reply;
  grpc::Status s = ask({good}, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(reply.shards_size(), 1);
  EXPECT_EQ(reply.shards(0).tensors(0).name(), "t");
  pb::TensorRegion lopsided = good;
  lopsided.add_shape(3);  // two dimensions, one offset
  s = ask({lopsided}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("region of tensor 't'"), std::string::npos)
      << s.error_message();
  pb::TensorRegion negative = good;
  negative.set_offset(0, -5);
  s = ask({negative}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("offset -5"), std::string::npos)
      << s.error_message();
  pb::TensorRegion huge = good;
  huge.set_shape(0, INT64_MAX);
  s = ask({huge}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pb::TensorRegion badname = good;
  badname.set_name("../x");
  s = ask({badname}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = ask(std::vector<pb::TensorRegion>((1 << 16) + 1, good), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControlServiceTest, LiveChunksStreamsInBatches) {
  const int n = kLiveIdsPerMessage + 100;
  auto ids = PutChunks("j", n);
  pb::ShardManifest m;
  m.set_job("j");
  m.set_step(3);
  m.set_world_size(1);
  m.set_chunk_size(4096);
  auto* t = m.add_tensors();
  t->set_name("t");
  t->set_dtype("U8");
  t->add_shape(int64_t{4096} * n);
  t->set_byte_size(uint64_t{4096} * n);
  for (const auto& id : ids) {
    auto* c = t->add_chunks();
    c->set_id(id.ToBytes());
    c->set_raw_length(4096);
  }
  ASSERT_TRUE(meta_->CommitShard(m).ok());

  grpc::ClientContext ctx;
  pb::LiveChunksRequest req;
  req.set_job("j");
  auto reader = stub_->LiveChunks(&ctx, req);
  pb::LiveChunksReply batch;
  int messages = 0;
  ChunkIdSet got;
  while (reader->Read(&batch)) {
    ++messages;
    for (const auto& id : batch.ids()) {
      got.insert(*format::ChunkId::FromBytes(id));
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(messages, 2);
  EXPECT_EQ(got, ChunkIdSet(ids.begin(), ids.end()));

  grpc::ClientContext ctx2;
  req.set_job("nothing-here");
  auto none = stub_->LiveChunks(&ctx2, req);
  while (none->Read(&batch)) {
  }
  EXPECT_EQ(none->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace stagger::server
