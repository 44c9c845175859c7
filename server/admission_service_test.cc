// Server admission end to end: DataService behind a listener that shares
// its IngestAdmission, over UCX and the in-process transport, with real
// stores in a temp dir. A test "hold" (the whole budget granted to a fake
// client) lets requests queue up before the order is observed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "server/data_service.h"
#include "server/ingest_admission.h"
#include "server/server.h"
#include "transport/inproc_transport.h"
#include "transport/ucx_transport.h"

namespace stagger::server {
namespace {

using format::DataOp;

enum class Kind { kUcx, kInProc };

void PrintTo(Kind kind, std::ostream* os) {
  *os << (kind == Kind::kUcx ? "Ucx" : "InProc");
}

constexpr absl::Duration kWait = absl::Seconds(30);
constexpr size_t kChunk = 256 << 10;  // rendezvous on UCX
constexpr uint64_t kHoldPeer = uint64_t{1} << 62;

std::string Chunk(uint32_t seed, size_t n = kChunk) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string PutHeader(const std::string& job, const std::string& raw,
                      bool corrupt_crc = false) {
  format::PutChunkRequest req;
  req.job = job;
  req.record.codec = format::Codec::kRaw;
  req.record.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
  req.record.raw_length = req.record.encoded_length = raw.size();
  req.record.payload_crc32c =
      format::Crc32c(raw.data(), raw.size()) ^ (corrupt_crc ? 1 : 0);
  return format::EncodePutChunk(req);
}

Status ReplyOf(const Result<transport::Message>& m) {
  if (!m.ok()) return m.status();
  auto r = format::DecodeReply(m->header);
  return r.ok() ? r->status : r.status();
}

// Completions of asynchronous calls, in the order they came.
class Log {
 public:
  explicit Log(int expected) : left_(expected) {}
  transport::ReplyCallback Callback(std::string label) {
    return [this, label](Result<transport::Message> m) {
      Status s = ReplyOf(m);
      std::string payload =
          m.ok() ? std::string(m->payload.view()) : std::string();
      absl::MutexLock l(&mu_);
      order_.push_back(label);
      status_[label] = s;
      payload_[label] = std::move(payload);
      --left_;
    };
  }
  bool Wait() {
    absl::MutexLock l(&mu_);
    auto done = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kWait);
  }
  std::vector<std::string> order() {
    absl::MutexLock l(&mu_);
    return order_;
  }
  Status status(const std::string& label) {
    absl::MutexLock l(&mu_);
    return status_[label];
  }
  std::string payload(const std::string& label) {
    absl::MutexLock l(&mu_);
    return payload_[label];
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Status> status_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> payload_ ABSL_GUARDED_BY(mu_);
};

// What the listener is given: forwards to the service's IngestAdmission and
// records, at each payload grant, the peer and how many reads the service
// had answered by then (the server-side order, free of the skew between
// client connections).
class WatchedAdmission : public transport::PullAdmission {
 public:
  struct Grant {
    uint64_t peer;
    uint64_t reads_answered;
  };
  WatchedAdmission(IngestAdmission* inner, const DataService* service)
      : inner_(inner), service_(service) {}

  void Request(uint64_t peer, size_t bytes,
               std::function<void()> grant) override {
    inner_->Request(peer, bytes, [this, peer, grant = std::move(grant)] {
      {
        absl::MutexLock l(&mu_);
        grants_.push_back({peer, service_->counters().chunks_read.load()});
      }
      grant();
    });
  }
  void Release(uint64_t peer, size_t bytes) override {
    inner_->Release(peer, bytes);
  }
  void PeerGone(uint64_t peer) override { inner_->PeerGone(peer); }

  std::vector<Grant> grants() {
    absl::MutexLock l(&mu_);
    return grants_;
  }

 private:
  IngestAdmission* const inner_;
  const DataService* const service_;
  absl::Mutex mu_;
  std::vector<Grant> grants_ ABSL_GUARDED_BY(mu_);
};

class AdmissionServiceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->name());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("stagger-adm-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    meta_ = *MetaStore::Open((dir_ / "meta").string());
    SegmentStoreOptions so;
    so.dir = (dir_ / "segments").string();
    segments_ = *SegmentStore::Open(so);
    ingest_ = std::make_unique<Executor>(2);
    readers_ = std::make_unique<Executor>(2);
    if (GetParam() == Kind::kUcx) {
      auto t = transport::NewUcxTransport();
      ASSERT_TRUE(t.ok()) << t.status();
      transport_ = std::move(*t);
    } else {
      transport_ = transport::NewInProcTransport();
    }
  }

  // Starts the service with a budget of `budget` bytes.
  void StartService(uint64_t budget) {
    admission_ = std::make_unique<IngestAdmission>(budget);
    service_ = std::make_unique<DataService>(segments_.get(), meta_.get(),
                                             ingest_.get(), readers_.get(),
                                             admission_.get());
    watched_ =
        std::make_unique<WatchedAdmission>(admission_.get(), service_.get());
    transport::ListenOptions options;
    options.admission = watched_.get();
    auto l = transport_->Listen(
        GetParam() == Kind::kUcx ? "ucx:" : "inproc:", service_.get(), options);
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = std::move(*l);
  }

  std::unique_ptr<transport::Connection> Connect() {
    auto c = transport_->Connect(listener_->address());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  void TearDown() override {
    listener_.reset();
    readers_.reset();
    ingest_.reset();
    segments_.reset();  // frees the last charged buffers
    if (admission_ != nullptr) {
      EXPECT_TRUE(admission_->AwaitIdle(absl::ZeroDuration()))
          << "credit left in use: " << admission_->Stats().in_flight_bytes
          << " bytes, " << admission_->Stats().queue_depth << " queued";
    }
    watched_.reset();
    admission_.reset();
    service_.reset();
    meta_.reset();
    transport_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Grants the whole budget to a fake client: everything else queues.
  // (A release that just returned the last credit may still be on its
  // way into the ledger: wait for the grant.)
  void Hold() {
    auto granted = std::make_shared<absl::Notification>();
    admission_->Request(kHoldPeer, admission_->budget_bytes(),
                        [granted] { granted->Notify(); });
    ASSERT_TRUE(granted->WaitForNotificationWithTimeout(kWait));
  }
  void Unhold() { admission_->Release(kHoldPeer, admission_->budget_bytes()); }

  static void PutAsync(transport::Connection* conn, const std::string& raw,
                       transport::ReplyCallback done) {
    conn->Call(static_cast<uint16_t>(DataOp::kPutChunk), PutHeader("job", raw),
               raw, std::move(done));
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<SegmentStore> segments_;
  std::unique_ptr<Executor> ingest_;
  std::unique_ptr<Executor> readers_;
  std::unique_ptr<IngestAdmission> admission_;
  std::unique_ptr<WatchedAdmission> watched_;
  std::unique_ptr<DataService> service_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Listener> listener_;
};

INSTANTIATE_TEST_SUITE_P(BothTransports, AdmissionServiceTest,
                         ::testing::Values(Kind::kUcx, Kind::kInProc),
                         [](const auto& info) {
                           return info.param == Kind::kUcx ? "Ucx" : "InProc";
                         });

TEST_P(AdmissionServiceTest, TwoClientsAreServedInTurnUnderATinyBudget) {
  ASSERT_NO_FATAL_FAILURE(StartService(2 * kChunk));
  auto a = Connect();
  auto b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kPuts = 12;
  std::vector<std::string> chunks;
  for (int i = 0; i < 2 * kPuts; ++i) chunks.push_back(Chunk(100 + i));

  ASSERT_NO_FATAL_FAILURE(Hold());
  Log log(2 * kPuts);
  // All of A's puts queue before any of B's: FIFO would serve A first.
  for (int i = 0; i < kPuts; ++i) {
    PutAsync(a.get(), chunks[i], log.Callback("A" + std::to_string(i)));
  }
  ASSERT_TRUE(admission_->AwaitQueueDepth(kPuts, kWait));
  for (int i = 0; i < kPuts; ++i) {
    PutAsync(b.get(), chunks[kPuts + i], log.Callback("B" + std::to_string(i)));
  }
  ASSERT_TRUE(admission_->AwaitQueueDepth(2 * kPuts, kWait));
  AdmissionStats queued = admission_->Stats();
  EXPECT_EQ(queued.queue_depth, static_cast<size_t>(2 * kPuts));
  EXPECT_EQ(queued.in_flight_bytes, 2 * kChunk);
  ASSERT_EQ(queued.clients.size(), 3u);  // A, B and the hold

  Unhold();
  ASSERT_TRUE(log.Wait());
  for (const std::string& label : log.order()) {
    EXPECT_TRUE(log.status(label).ok()) << label << ": " << log.status(label);
  }
  // Grant order on the server: neither client starves, both are served
  // in the first half (FIFO would serve all of A's first).
  std::vector<WatchedAdmission::Grant> grants = watched_->grants();
  ASSERT_EQ(grants.size(), static_cast<size_t>(2 * kPuts));
  const uint64_t peer_a = grants.front().peer;
  std::string order;
  for (const auto& g : grants) order += g.peer == peer_a ? 'A' : 'B';
  const int a_first_half =
      static_cast<int>(std::count(order.begin(), order.begin() + kPuts, 'A'));
  EXPECT_GE(a_first_half, kPuts / 3) << order;
  EXPECT_LE(a_first_half, kPuts - kPuts / 3) << order;
  EXPECT_EQ(service_->counters().chunks_written.load(),
            static_cast<uint64_t>(2 * kPuts));
  EXPECT_TRUE(admission_->AwaitIdle(kWait));
}

TEST_P(AdmissionServiceTest, RestoreReadOvertakesQueuedPuts) {
  ASSERT_NO_FATAL_FAILURE(StartService(2 * kChunk));
  auto writer = Connect();
  auto reader = Connect();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string stored = Chunk(1);
  ASSERT_TRUE(ReplyOf(writer->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                       PutHeader("job", stored), stored))
                  .ok());

  constexpr int kPuts = 8;
  std::vector<std::string> chunks;
  for (int i = 0; i < kPuts; ++i) chunks.push_back(Chunk(200 + i));
  ASSERT_NO_FATAL_FAILURE(Hold());
  Log log(kPuts + 1);
  for (int i = 0; i < kPuts; ++i) {
    PutAsync(writer.get(), chunks[i], log.Callback("put" + std::to_string(i)));
  }
  ASSERT_TRUE(admission_->AwaitQueueDepth(kPuts, kWait));
  const format::ChunkId id = format::ChunkId::Of(stored.data(), stored.size());
  reader->Call(static_cast<uint16_t>(DataOp::kGetChunk),
               format::EncodeGetChunk({"job", id}), "", log.Callback("get"));
  ASSERT_TRUE(admission_->AwaitQueueDepth(kPuts + 1, kWait));
  EXPECT_EQ(admission_->Stats().restore_queue_depth, 1u);

  Unhold();
  ASSERT_TRUE(log.Wait());
  // On the server, the read was answered before any queued put was even
  // admitted (its record and a put do not fit the budget together).
  std::vector<WatchedAdmission::Grant> grants = watched_->grants();
  ASSERT_EQ(grants.size(), static_cast<size_t>(kPuts + 1));
  EXPECT_EQ(grants[0].reads_answered, 0u);  // the chunk stored first
  for (int i = 1; i <= kPuts; ++i) {
    EXPECT_EQ(grants[i].reads_answered, 1u) << "put grant " << i;
  }
  EXPECT_TRUE(log.status("get").ok()) << log.status("get");
  EXPECT_TRUE(log.payload("get") == stored);
  for (int i = 0; i < kPuts; ++i) {
    EXPECT_TRUE(log.status("put" + std::to_string(i)).ok());
  }
  EXPECT_EQ(admission_->Stats().restore_grants, 1u);
  EXPECT_TRUE(admission_->AwaitIdle(kWait));
}

TEST_P(AdmissionServiceTest, ChunkLargerThanTheBudgetIsStoredAndRead) {
  ASSERT_NO_FATAL_FAILURE(StartService(64 << 10));
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  const std::string big = Chunk(7, 1 << 20);
  ASSERT_TRUE(ReplyOf(conn->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                     PutHeader("job", big), big))
                  .ok());
  auto got =
      conn->CallSync(static_cast<uint16_t>(DataOp::kGetChunk),
                     format::EncodeGetChunk(
                         {"job", format::ChunkId::Of(big.data(), big.size())}),
                     "");
  ASSERT_TRUE(ReplyOf(got).ok()) << ReplyOf(got);
  EXPECT_TRUE(got->payload.view() == big);
  AdmissionStats s = admission_->Stats();
  EXPECT_EQ(s.checkpoint_grants, 1u);
  EXPECT_EQ(s.restore_grants, 1u);
  EXPECT_TRUE(admission_->AwaitIdle(kWait));
}

TEST_P(AdmissionServiceTest, BadRequestsAndDisconnectsLeaveNoCreditBehind) {
  ASSERT_NO_FATAL_FAILURE(StartService(2 * kChunk));
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  const std::string raw = Chunk(3);
  EXPECT_EQ(
      ReplyOf(conn->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                             PutHeader("job", raw, /*corrupt_crc=*/true), raw))
          .code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReplyOf(conn->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                   "\x03garbage", raw))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplyOf(conn->CallSync(999, "", raw)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(admission_->AwaitIdle(kWait));

  // A client that disconnects with puts still waiting for credit.
  ASSERT_NO_FATAL_FAILURE(Hold());
  auto leaving = Connect();
  ASSERT_NE(leaving, nullptr);
  Log log(3);
  std::vector<std::string> chunks = {Chunk(10), Chunk(11), Chunk(12)};
  for (int i = 0; i < 3; ++i) {
    PutAsync(leaving.get(), chunks[i], log.Callback(std::to_string(i)));
  }
  ASSERT_TRUE(admission_->AwaitQueueDepth(3, kWait));
  leaving.reset();
  ASSERT_TRUE(log.Wait());
  EXPECT_EQ(log.status("0").code(), absl::StatusCode::kUnavailable);
  Unhold();
  EXPECT_TRUE(admission_->AwaitIdle(kWait))
      << admission_->Stats().queue_depth << " queued";
  EXPECT_EQ(service_->counters().chunks_written.load(), 0u);

  // Still serving.
  EXPECT_TRUE(ReplyOf(conn->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                     PutHeader("job", raw), raw))
                  .ok());
}

TEST_P(AdmissionServiceTest, DrainTerminatesWithPutsAndReadsWaiting) {
  ASSERT_NO_FATAL_FAILURE(StartService(2 * kChunk));
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  const std::string stored = Chunk(5);
  ASSERT_TRUE(ReplyOf(conn->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                     PutHeader("job", stored), stored))
                  .ok());

  ASSERT_NO_FATAL_FAILURE(Hold());
  Log log(4);
  std::vector<std::string> chunks = {Chunk(20), Chunk(21), Chunk(22)};
  for (int i = 0; i < 3; ++i) {
    PutAsync(conn.get(), chunks[i], log.Callback("put" + std::to_string(i)));
  }
  ASSERT_TRUE(admission_->AwaitQueueDepth(3, kWait));
  // An accepted read waiting for restore credit.
  conn->Call(static_cast<uint16_t>(DataOp::kGetChunk),
             format::EncodeGetChunk(
                 {"job", format::ChunkId::Of(stored.data(), stored.size())}),
             "", log.Callback("get"));
  ASSERT_TRUE(admission_->AwaitQueueDepth(4, kWait));
  service_->StopAccepting();
  std::thread drain([this] { service_->WaitIdle(); });
  Unhold();  // the read is served, the puts are refused
  drain.join();
  ASSERT_TRUE(log.Wait());
  EXPECT_TRUE(log.status("get").ok()) << log.status("get");
  for (int i = 0; i < 3; ++i) {
    Status s = log.status("put" + std::to_string(i));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  EXPECT_TRUE(admission_->AwaitIdle(kWait));
}

TEST(ServerAdmissionTest, ZeroBudgetIsRejected) {
  ServerOptions options;
  options.data_dir = "/nonexistent-never-created";
  options.ingest_budget_bytes = 0;
  auto server = Server::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(options.data_dir));
}

TEST(ServerAdmissionTest, ServerReportsItsAdmissionBooks) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("stagger-adm-server-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto transport = transport::NewInProcTransport();
  ServerOptions options;
  options.data_dir = dir.string();
  options.listen = "127.0.0.1:0";
  options.data_listen = "inproc:";
  options.transport = transport.get();
  options.ingest_budget_bytes = 8 << 20;
  options.compact_threshold = 0;
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto conn = transport->Connect((*server)->data_address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string raw = Chunk(9);
  ASSERT_TRUE(
      ReplyOf((*conn)->CallSync(static_cast<uint16_t>(DataOp::kPutChunk),
                                PutHeader("job", raw), raw))
          .ok());
  AdmissionStats s = (*server)->admission_stats();
  EXPECT_EQ(s.budget_bytes, 8u << 20);
  EXPECT_EQ(s.checkpoint_grants, 1u);
  EXPECT_EQ(s.queue_depth, 0u);
  conn->reset();
  (*server)->Shutdown();
  EXPECT_EQ((*server)->admission_stats().budget_bytes, 0u);
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace stagger::server
