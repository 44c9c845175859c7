#include "server/tier/s3_credentials.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stagger::server::tier {
namespace {

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// The keys of [profile] in an INI file ("[profile NAME]" is the config
// file's spelling; the credentials file's is "[NAME]"). Comments start
// with '#' or ';'.
std::map<std::string, std::string> Section(std::istream& in,
                                           const std::string& profile) {
  std::map<std::string, std::string> keys;
  bool inside = false;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      absl::string_view name =
          absl::StripAsciiWhitespace(l.substr(1, l.size() - 2));
      if (name.substr(0, 8) == "profile ") {
        name = absl::StripAsciiWhitespace(name.substr(8));
      }
      inside = name == profile;
      continue;
    }
    const size_t eq = l.find('=');
    if (!inside || eq == absl::string_view::npos) continue;
    keys[std::string(absl::StripAsciiWhitespace(l.substr(0, eq)))] =
        std::string(absl::StripAsciiWhitespace(l.substr(eq + 1)));
  }
  return keys;
}

}  // namespace

std::map<std::string, std::string> S3Environment() {
  std::map<std::string, std::string> env;
  for (const char* name :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "HOME"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return env;
}

Result<S3Credentials> FindS3Credentials(
    const std::map<std::string, std::string>& env) {
  const std::string key = Get(env, "AWS_ACCESS_KEY_ID");
  const std::string secret = Get(env, "AWS_SECRET_ACCESS_KEY");
  if (!key.empty() || !secret.empty()) {
    if (key.empty() || secret.empty()) {
      return absl::InvalidArgumentError(
          "S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must "
          "be set together (one of them is empty)");
    }
    return S3Credentials{key, secret, Get(env, "AWS_SESSION_TOKEN"),
                         "the environment (AWS_ACCESS_KEY_ID)",
                         /*from_file=*/false};
  }
  std::string file = Get(env, "AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty() && !Get(env, "HOME").empty()) {
    file = Get(env, "HOME") + "/.aws/credentials";
  }
  std::string profile = Get(env, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string looked = absl::StrCat(
      "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set, and ",
      file.empty() ? std::string("no credentials file (HOME is not set)")
                   : absl::StrCat("'", file, "' has no profile '", profile,
                                  "' with aws_access_key_id"));
  std::ifstream in(file);
  if (file.empty() || !in) {
    return absl::NotFoundError(
        absl::StrCat("S3 credentials: ", looked,
                     file.empty() ? "" : " (the file cannot be read)"));
  }
  std::map<std::string, std::string> keys = Section(in, profile);
  S3Credentials c{keys["aws_access_key_id"], keys["aws_secret_access_key"],
                  keys["aws_session_token"],
                  absl::StrCat("'", file, "' profile '", profile, "'"),
                  /*from_file=*/true};
  if (c.access_key.empty() && c.secret_key.empty()) {
    return absl::NotFoundError(absl::StrCat("S3 credentials: ", looked));
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 credentials: ", c.source,
        " needs both aws_access_key_id and aws_secret_access_key"));
  }
  return c;
}

}  // namespace stagger::server::tier
