// Where the S3 tier finds its credentials: the environment first, then the
// shared credentials file and its profile; clear errors naming what was
// looked at.
#include "server/tier/s3_credentials.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace stagger::server::tier {
namespace {

class S3CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/s3creds" + std::to_string(::getpid());
    std::string cmd = "mkdir -p " + dir_ + "/.aws";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)!std::system(cmd.c_str());
  }
  void Write(const std::string& text) {
    std::ofstream(dir_ + "/.aws/credentials") << text;
  }
  std::string dir_;
};

TEST_F(S3CredentialsTest, TheEnvironmentComesFirst) {
  Write("[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = f\n");
  auto c = FindS3Credentials({{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                              {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                              {"AWS_SESSION_TOKEN", "tok"},
                              {"HOME", dir_}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "ENVKEY");
  EXPECT_EQ(c->secret_key, "envsecret");
  EXPECT_EQ(c->session_token, "tok");
  auto half = FindS3Credentials({{"AWS_ACCESS_KEY_ID", "ENVKEY"}});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("AWS_SECRET_ACCESS_KEY"),
            std::string::npos);
}

TEST_F(S3CredentialsTest, TheFileByProfile) {
  Write(
      "# comment\n[default]\naws_access_key_id = DEFKEY\n"
      "aws_secret_access_key = defsecret\n\n"
      "[profile ckpt]\n aws_access_key_id=CKPTKEY \n"
      "aws_secret_access_key=ckptsecret\naws_session_token = t2\n");
  auto d = FindS3Credentials({{"HOME", dir_}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->access_key, "DEFKEY");
  EXPECT_EQ(d->session_token, "");
  auto p = FindS3Credentials({{"HOME", dir_}, {"AWS_PROFILE", "ckpt"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->access_key, "CKPTKEY");
  EXPECT_EQ(p->secret_key, "ckptsecret");
  EXPECT_EQ(p->session_token, "t2");
  EXPECT_NE(p->source.find("ckpt"), std::string::npos);
  // AWS_SHARED_CREDENTIALS_FILE names another file.
  std::ofstream(dir_ + "/other") << "[default]\naws_access_key_id = O\n"
                                    "aws_secret_access_key = o\n";
  auto o = FindS3Credentials(
      {{"HOME", dir_}, {"AWS_SHARED_CREDENTIALS_FILE", dir_ + "/other"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->access_key, "O");
}

TEST_F(S3CredentialsTest, NoneOrHalfAreClearErrors) {
  auto none = FindS3Credentials({{"HOME", dir_}});  // no file
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(".aws/credentials"), std::string::npos)
      << none.status();
  Write("[default]\naws_access_key_id = ONLYKEY\n");
  auto half = FindS3Credentials({{"HOME", dir_}});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  auto other = FindS3Credentials({{"HOME", dir_}, {"AWS_PROFILE", "nope"}});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(other.status().message().find("'nope'"), std::string::npos)
      << other.status();
}

}  // namespace
}  // namespace stagger::server::tier
