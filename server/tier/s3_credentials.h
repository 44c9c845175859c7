// Credentials for the S3 object store, found where AWS's own tools look:
// the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, for
// temporary credentials, AWS_SESSION_TOKEN), else the shared credentials
// file ($AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), profile
// $AWS_PROFILE or "default". Never from the command line, where every user
// of the host could read them.
//
// Thread-safety: plain functions.
#ifndef STAGGER_SERVER_TIER_S3_CREDENTIALS_H_
#define STAGGER_SERVER_TIER_S3_CREDENTIALS_H_

#include <map>
#include <string>

#include "stagger/status.h"

namespace stagger::server::tier {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty for long-term keys
  std::string source;         // where they came from, for messages
  bool from_file = false;     // the shared credentials file (re-readable)
};

// The credentials from `env` (a copy of the variables above; tests pass
// their own) and the file it names or $HOME's. NOT_FOUND naming every
// place looked at when there are none; INVALID_ARGUMENT when a profile
// has one key and not the other.
Result<S3Credentials> FindS3Credentials(
    const std::map<std::string, std::string>& env);

// The process's environment, the variables FindS3Credentials reads.
std::map<std::string, std::string> S3Environment();

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_S3_CREDENTIALS_H_
