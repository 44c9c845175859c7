// Per-job tokens (stagger-server --auth-tokens): a token for job A cannot
// list, read, write, delete or gc job B, on the control plane or the data
// plane; calls without a known token are UNAUTHENTICATED; without tokens
// the server refuses to listen beyond loopback unless told --insecure.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "format/data_plane.h"
#include "gtest/gtest.h"
#include "proto/stagger.grpc.pb.h"
#include "server/server.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"
#include "transport/ucx_transport.h"

namespace stagger {
namespace {

constexpr char kTokenA[] = "tokA-0123456789abcdef";
constexpr char kTokenB[] = "tokB-0123456789abcdef";
constexpr char kAdmin[] = "admin-0123456789abcdef";

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.path() + "/tokens";
    std::ofstream f(tokens_);
    f << "# test grants\n"
      << kTokenA << " ja\n"
      << kTokenB << "\tjb,jc\n\n"
      << kAdmin << " *\n";
    f.close();
    server::ServerOptions so;
    so.data_dir = dir_.path() + "/data";
    so.listen = "127.0.0.1:0";
    so.auth_tokens_file = tokens_;
    auto srv = server::Server::Start(so);
    ASSERT_TRUE(srv.ok()) << srv.status();
    server_ = std::move(*srv);
    stub_ = pb::Stagger::NewStub(grpc::CreateChannel(
        server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }
  CheckpointerOptions Options(const std::string& job,
                              const std::string& token) {
    CheckpointerOptions o;
    o.servers = server_->grpc_address();
    o.job = job;
    o.token = token;
    o.rpc_timeout_s = 10;
    return o;
  }
  static void WithToken(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("x-stagger-token", token);
  }

  testutil::TempDir dir_;
  std::string tokens_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<pb::Stagger::Stub> stub_;
};

// Every control-plane call for job `job` with `token`: its status codes,
// in the order Hello, CommitShard, GetStep, ListSteps, Gc, DeleteSteps,
// LiveChunks, Sweep.
std::vector<grpc::StatusCode> Calls(pb::Stagger::Stub& stub,
                                    const std::string& token,
                                    const std::string& job) {
  std::vector<grpc::StatusCode> out;
  auto ctx = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) c->AddMetadata("x-stagger-token", token);
    return c;
  };
  {
    pb::HelloReply r;
    out.push_back(stub.Hello(ctx().get(), pb::HelloRequest(), &r).error_code());
  }
  {
    pb::CommitShardRequest req;
    pb::ShardManifest* m = req.mutable_manifest();
    m->set_job(job);
    m->set_step(1);
    m->set_world_size(1);
    m->set_chunk_size(4096);
    pb::CommitShardReply r;
    out.push_back(stub.CommitShard(ctx().get(), req, &r).error_code());
  }
  {
    pb::GetStepRequest req;
    req.set_job(job);
    req.set_latest(true);
    pb::GetStepReply r;
    out.push_back(stub.GetStep(ctx().get(), req, &r).error_code());
  }
  {
    pb::ListStepsRequest req;
    req.set_job(job);
    pb::ListStepsReply r;
    out.push_back(stub.ListSteps(ctx().get(), req, &r).error_code());
  }
  {
    pb::GcRequest req;
    req.set_job(job);
    req.set_keep(1);
    pb::GcReply r;
    out.push_back(stub.Gc(ctx().get(), req, &r).error_code());
  }
  {
    pb::DeleteStepsRequest req;  // a step no one saved: deletes nothing
    req.set_job(job);
    req.add_steps(999);
    pb::GcReply r;
    out.push_back(stub.DeleteSteps(ctx().get(), req, &r).error_code());
  }
  {
    pb::LiveChunksRequest req;
    req.set_job(job);
    auto c = ctx();
    auto reader = stub.LiveChunks(c.get(), req);
    pb::LiveChunksReply r;
    while (reader->Read(&r)) {
    }
    out.push_back(reader->Finish().error_code());
  }
  {
    auto c = ctx();
    pb::SweepReply r;
    auto writer = stub.Sweep(c.get(), &r);
    pb::SweepRequest msg;
    msg.set_job(job);
    msg.set_last(true);
    writer->Write(msg);
    writer->WritesDone();
    out.push_back(writer->Finish().error_code());
  }
  return out;
}

TEST_F(AuthTest, ATokenReachesOnlyItsJobs) {
  // Job ja saved and loaded with its own token.
  std::vector<char> w(1 << 20);
  testutil::FillPattern(w, 3);
  const std::vector<char> saved = w;
  {
    auto ck = Checkpointer::Open(Options("ja", kTokenA));
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(h->Wait().ok()) << h->Wait();
    std::fill(w.begin(), w.end(), 0);
    auto got = (*ck)->Load(kLatestStep);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(w, saved);
  }
  // Token B may not write ja: the first put is refused.
  {
    auto ck = Checkpointer::Open(Options("ja", kTokenB));
    ASSERT_TRUE(ck.ok()) << ck.status();  // Hello needs a valid token only
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = (*ck)->Save(2);
    ASSERT_TRUE(h.ok()) << h.status();
    Status s = h->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find("may not touch job 'ja'"), std::string::npos)
        << s;
    // Nor read it.
    auto got = (*ck)->Load(kLatestStep);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied)
        << got.status();
  }
  using C = grpc::StatusCode;
  // Every control-plane call of job ja: allowed for A and admin (the
  // commit is refused on its contents, the sweep because this server holds
  // ja's steps), denied for B, unauthenticated without a token.
  const std::vector<C> allowed = Calls(*stub_, kTokenA, "ja");
  EXPECT_EQ(allowed[0], C::OK);
  for (size_t i = 1; i < allowed.size(); ++i) {
    EXPECT_NE(allowed[i], C::PERMISSION_DENIED) << "call " << i;
    EXPECT_NE(allowed[i], C::UNAUTHENTICATED) << "call " << i;
  }
  EXPECT_EQ(Calls(*stub_, kAdmin, "ja"), allowed);
  const std::vector<C> denied = Calls(*stub_, kTokenB, "ja");
  EXPECT_EQ(denied[0], C::OK);
  for (size_t i = 1; i < denied.size(); ++i) {
    EXPECT_EQ(denied[i], C::PERMISSION_DENIED) << "call " << i;
  }
  for (const std::string& token :
       {std::string(), std::string("not-a-token-at-all")}) {
    for (C c : Calls(*stub_, token, "ja")) EXPECT_EQ(c, C::UNAUTHENTICATED);
  }
  // ListJobs names only the jobs a token may touch.
  auto jobs = [&](const std::string& token) {
    grpc::ClientContext ctx;
    WithToken(&ctx, token);
    pb::ListJobsReply r;
    grpc::Status st = stub_->ListJobs(&ctx, pb::ListJobsRequest(), &r);
    std::vector<std::string> names;
    if (!st.ok()) names.push_back("error " + std::to_string(st.error_code()));
    for (const pb::JobInfo& j : r.jobs()) names.push_back(j.job());
    return names;
  };
  EXPECT_EQ(jobs(kTokenA), std::vector<std::string>{"ja"});
  EXPECT_EQ(jobs(kAdmin), std::vector<std::string>{"ja"});
  EXPECT_EQ(jobs(kTokenB), std::vector<std::string>{});
  EXPECT_EQ(jobs(""), std::vector<std::string>{"error 16"});  // UNAUTHENTICATED
  auto anonymous = Checkpointer::Open(Options("ja", ""));
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kUnauthenticated)
      << anonymous.status();
}

TEST_F(AuthTest, TheDataPlaneNeedsTheKeyFromHello) {
  grpc::ClientContext ctx;
  WithToken(&ctx, kTokenA);
  pb::HelloReply hello;
  ASSERT_TRUE(stub_->Hello(&ctx, pb::HelloRequest(), &hello).ok());
  ASSERT_FALSE(hello.data_key().empty());
  // The server says which codecs it takes: the numeric delta included.
  EXPECT_EQ(hello.codec_count(), static_cast<uint32_t>(format::kCodecCount));
  EXPECT_GT(hello.codec_count(),
            static_cast<uint32_t>(format::Codec::kNumDeltaByteGroupZstd));
  auto transport = transport::NewUcxTransport();
  ASSERT_TRUE(transport.ok()) << transport.status();
  auto conn = (*transport)->Connect(hello.data_address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto get = [&](const std::string& job) {
    format::ChunkId id = format::ChunkId::Of("x", 1);
    auto r = (*conn)->CallSync(static_cast<uint16_t>(format::DataOp::kGetChunk),
                               format::EncodeGetChunk({job, id}), "");
    if (!r.ok()) return r.status();
    auto d = format::DecodeReply(r->header);
    return d.ok() ? d->status : d.status();
  };
  auto auth = [&](const std::string& key) {
    auto r = (*conn)->CallSync(static_cast<uint16_t>(format::DataOp::kAuth),
                               key, "");
    if (!r.ok()) return r.status();
    auto d = format::DecodeReply(r->header);
    return d.ok() ? d->status : d.status();
  };
  EXPECT_EQ(get("ja").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth("0123456789abcdef").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(get("ja").code(), absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(auth(hello.data_key()).ok());
  EXPECT_EQ(get("ja").code(), absl::StatusCode::kNotFound);  // allowed
  EXPECT_EQ(get("jb").code(), absl::StatusCode::kPermissionDenied);
}

TEST(AuthStartTest, NoTokensMeansLoopbackOnlyUnlessInsecure) {
  testutil::TempDir dir;
  server::ServerOptions so;
  so.data_dir = dir.path() + "/data";
  so.listen = "0.0.0.0:0";
  auto refused = server::Server::Start(so);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos)
      << refused.status();
  so.insecure = true;
  auto open = server::Server::Start(so);
  EXPECT_TRUE(open.ok()) << open.status();
}

TEST(AuthStartTest, ABadTokensFileStopsTheServerNamingTheLine) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/tokens";
  server::ServerOptions so;
  so.data_dir = dir.path() + "/data";
  so.listen = "127.0.0.1:0";
  so.auth_tokens_file = path;
  struct Case {
    std::string text, want;
  };
  for (const Case& c : std::vector<Case>{
           {"short ja\n", ":1: token is 5 characters"},
           {"# c\n0123456789abcdefgh\n", ":2: want 'TOKEN JOB[,JOB...]'"},
           {"0123456789abcdefgh ja\n0123456789abcdefgh jb\n",
            ":2: token given twice"},
           {"0123456789abcdefgh bad/job\n", ":1"},
           {"# nothing\n", "grants nothing"}}) {
    std::ofstream(path) << c.text;
    auto s = server::Server::Start(so);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos)
        << s.status();
  }
  so.auth_tokens_file = dir.path() + "/absent";
  EXPECT_EQ(server::Server::Start(so).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger
