// ReadRecords and StoreRecords (the promoter's repair of a degraded
// memory-level step, server/promoter.h) between two real stagger-server
// processes: records read from one are stored on the other as puts, and
// what is wrong is refused, naming it, with nothing stored.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "format/chunk_id.h"
#include "gtest/gtest.h"
#include "proto/stagger.grpc.pb.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::ServerProcess;

// A gRPC client of the server's control plane.
auto ClientOf(const ServerProcess& s) {
  return pb::Stagger::NewStub(
      grpc::CreateChannel(s.grpc(), grpc::InsecureChannelCredentials()));
}

class RecordsRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b"}) {
      auto s = ServerProcess::Start(dir_.path() + "/" + name);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    // A step of 6 chunks on server a, raw and zstd.
    CheckpointerOptions o;
    o.servers = servers_[0]->grpc();
    o.job = "rec";
    o.chunk_size = 64 << 10;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    std::vector<char> w(6 * o.chunk_size);
    testutil::FillPattern(w, 7);
    std::fill(w.begin(), w.begin() + 2 * o.chunk_size, 0);  // compresses
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
    pb::GetStepRequest req;
    req.set_job("rec");
    req.set_step(1);
    req.set_all_ranks(true);
    pb::GetStepReply reply;
    grpc::ClientContext ctx;
    ASSERT_TRUE(ClientOf(*servers_[0])->GetStep(&ctx, req, &reply).ok());
    ASSERT_EQ(reply.shards_size(), 1);
    ASSERT_EQ(reply.shards(0).tensors_size(), 1);
    for (const auto& c : reply.shards(0).tensors(0).chunks()) {
      ids_.push_back(c.id());
    }
    ASSERT_EQ(ids_.size(), 6u);
  }

  grpc::Status Read(const ServerProcess& s, const std::vector<std::string>& ids,
                    std::vector<pb::ChunkRecord>* out) {
    pb::ReadRecordsRequest req;
    req.set_job("rec");
    for (const std::string& id : ids) req.add_ids(id);
    grpc::ClientContext ctx;
    auto client = ClientOf(s);
    auto reader = client->ReadRecords(&ctx, req);
    pb::ChunkRecord r;
    while (reader->Read(&r)) out->push_back(r);
    return reader->Finish();
  }

  grpc::Status Store(const ServerProcess& s,
                     const std::vector<pb::ChunkRecord>& records,
                     uint64_t* stored) {
    grpc::ClientContext ctx;
    pb::StoreRecordsReply reply;
    auto client = ClientOf(s);
    auto writer = client->StoreRecords(&ctx, &reply);
    for (const auto& r : records) {
      if (!writer->Write(r)) break;
    }
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    *stored = reply.stored();
    return st;
  }

  // Bit i: server `s` holds ids_[i] on its disk (Flush).
  std::string OnDisk(const ServerProcess& s) {
    pb::FlushRequest req;
    req.set_job("rec");
    for (const std::string& id : ids_) req.add_ids(id);
    pb::FlushReply reply;
    grpc::ClientContext ctx;
    EXPECT_TRUE(ClientOf(s)->Flush(&ctx, req, &reply).ok());
    return reply.on_disk();
  }

  testutil::TempDir dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::string> ids_;
};

TEST_F(RecordsRpcTest, RecordsReadFromOneServerAreStoredOnAnother) {
  std::vector<pb::ChunkRecord> records;
  ASSERT_TRUE(Read(*servers_[0], ids_, &records).ok());
  ASSERT_EQ(records.size(), ids_.size());
  EXPECT_EQ(OnDisk(*servers_[1]), std::string(1, '\0'));
  uint64_t stored = 0;
  grpc::Status s = Store(*servers_[1], records, &stored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(stored, ids_.size());
  EXPECT_EQ(OnDisk(*servers_[1]), std::string(1, '\x3f'));
  // And b serves them back as a had them.
  std::vector<pb::ChunkRecord> again;
  ASSERT_TRUE(Read(*servers_[1], ids_, &again).ok());
  ASSERT_EQ(again.size(), records.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].payload(), records[i].payload()) << i;
  }
}

TEST_F(RecordsRpcTest, WhatIsWrongIsRefusedAndNothingIsStored) {
  std::vector<pb::ChunkRecord> records;
  grpc::Status s =
      Read(*servers_[0], {ids_[0], format::ChunkId{9, 9}.ToBytes()}, &records);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  s = Read(*servers_[0], {std::string(15, 'x')}, &records);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Read(*servers_[0], std::vector<std::string>(4097, ids_[0]), &records);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  records.clear();
  ASSERT_TRUE(Read(*servers_[0], {ids_[3]}, &records).ok());
  ASSERT_EQ(records.size(), 1u);
  uint64_t stored = 0;
  pb::ChunkRecord flipped = records[0];
  flipped.mutable_payload()->at(100) ^= 1;  // its CRC no longer holds
  s = Store(*servers_[1], {flipped}, &stored);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(
      s.error_message().find(format::ChunkId::FromBytes(ids_[3])->ToHex()),
      std::string::npos)
      << s.error_message();
  pb::ChunkRecord garbage = records[0];
  garbage.set_header("not a record header");
  s = Store(*servers_[1], {garbage}, &stored);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(stored, 0u);
  pb::ChunkRecord bad_job = records[0];
  bad_job.set_job("../etc");
  s = Store(*servers_[1], {bad_job}, &stored);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(OnDisk(*servers_[1]), std::string(1, '\0'));
}

}  // namespace
}  // namespace stagger
