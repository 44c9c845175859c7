// The control plane over TLS: a client that trusts the server's CA saves
// and loads; one that does not, or speaks plaintext, is refused with a
// clear error; a server given half a TLS setting does not start.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/server.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

// A self-signed certificate for 127.0.0.1 and localhost: `name`.pem and
// `name`.key in `dir`. False when openssl is missing or fails.
bool MakeCert(const std::string& dir, const std::string& name) {
  testutil::RunResult r = testutil::RunProcess(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
       "-days", "2", "-subj", "/CN=stagger-test", "-addext",
       "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
       dir + "/" + name + ".key", "-out", dir + "/" + name + ".pem"});
  return r.exit_code == 0;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!MakeCert(dir_.path(), "server") || !MakeCert(dir_.path(), "other")) {
      GTEST_SKIP() << "openssl could not make test certificates";
    }
  }
  server::ServerOptions Options() {
    server::ServerOptions so;
    so.data_dir = dir_.path() + "/data";
    so.listen = "127.0.0.1:0";
    so.tls_cert_file = dir_.path() + "/server.pem";
    so.tls_key_file = dir_.path() + "/server.key";
    return so;
  }
  testutil::TempDir dir_;
};

TEST_F(TlsTest, TrustedClientSavesAndLoadsOthersAreRefused) {
  auto srv = server::Server::Start(Options());
  ASSERT_TRUE(srv.ok()) << srv.status();
  std::vector<char> w(3 << 20);
  testutil::FillPattern(w, 5);
  const std::vector<char> saved = w;
  CheckpointerOptions o;
  o.servers = (*srv)->grpc_address();
  o.job = "tls";
  o.tls_ca_file = dir_.path() + "/server.pem";
  {
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->Wait().ok()) << h->Wait();
    std::fill(w.begin(), w.end(), 0);
    auto step = (*ck)->Load(kLatestStep);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(w, saved);
  }
  o.rpc_timeout_s = 5;
  CheckpointerOptions plain = o;
  plain.tls_ca_file.clear();
  EXPECT_EQ(Checkpointer::Open(plain).status().code(),
            absl::StatusCode::kUnavailable);
  CheckpointerOptions wrong = o;
  wrong.tls_ca_file = dir_.path() + "/other.pem";
  auto refused = Checkpointer::Open(wrong);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("other.pem"), std::string::npos)
      << refused.status();
  CheckpointerOptions missing = o;
  missing.tls_ca_file = dir_.path() + "/nowhere.pem";
  auto bad = Checkpointer::Open(missing);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("nowhere.pem"), std::string::npos);
}

TEST_F(TlsTest, HalfATlsSettingStopsTheServer) {
  server::ServerOptions so = Options();
  so.tls_key_file.clear();
  auto srv = server::Server::Start(so);
  EXPECT_EQ(srv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(srv.status().message().find("--tls-key"), std::string::npos);
  so = Options();
  so.tls_key_file = dir_.path() + "/absent.key";
  srv = server::Server::Start(so);
  EXPECT_EQ(srv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(srv.status().message().find("absent.key"), std::string::npos);
}

}  // namespace
}  // namespace stagger
