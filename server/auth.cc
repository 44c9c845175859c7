#include "server/auth.h"

#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "format/names.h"

namespace stagger::server {
namespace {

constexpr size_t kMinTokenLength = 16;

bool TokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("._~+/=-").find(c) != std::string_view::npos;
}

}  // namespace

Result<std::unique_ptr<Authorizer>> Authorizer::FromFile(
    const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth tokens file '", path, "' cannot be read"));
  }
  auto a = std::make_unique<Authorizer>();
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    const std::string where = absl::StrCat(path, ":", n);
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::vector<std::string> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": want 'TOKEN JOB[,JOB...]', got ",
                       fields.size(), " fields"));
    }
    const std::string& token = fields[0];
    if (token.size() < kMinTokenLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": token is ", token.size(),
                       " characters; at least ", kMinTokenLength));
    }
    for (char c : token) {
      if (!TokenChar(c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": token has a character outside ", "[A-Za-z0-9._~+/=-]"));
      }
    }
    if (a->tokens_.count(token) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": token given twice"));
    }
    auto g = std::make_unique<Grant>();
    g->name = absl::StrCat("token at ", where);
    for (const std::string& job :
         std::vector<std::string>(absl::StrSplit(fields[1], ','))) {
      if (job == "*") {
        g->all_jobs = true;
        continue;
      }
      Status valid = format::ValidateName("job", job);
      if (!valid.ok()) return WithContext(valid, where);
      g->jobs.insert(job);
    }
    a->tokens_.emplace(token, std::move(g));
  }
  if (a->tokens_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth tokens file '", path, "' grants nothing"));
  }
  return a;
}

Result<const Grant*> Authorizer::Check(std::string_view token) const {
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "this server needs a token (client option token= or STAGGER_TOKEN)");
  }
  auto it = tokens_.find(token);
  if (it == tokens_.end()) {
    return absl::UnauthenticatedError("unknown token");
  }
  return it->second.get();
}

Status Authorizer::CheckJob(const Grant& grant, const std::string& job) {
  if (grant.Allows(job)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "the ", grant.name, " (jobs ", absl::StrJoin(grant.jobs, ","),
      ") may not touch job '", job, "'"));
}

std::string Authorizer::MintDataKey(const Grant* grant) {
  // 256 bits from the kernel's generator (std::random_device reads
  // getrandom/urandom on Linux): unguessable, unlike a seeded engine.
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 8; ++i) {
    absl::StrAppend(&key, absl::Hex(rd(), absl::kZeroPad8));
  }
  absl::MutexLock l(&mu_);
  keys_.emplace(key, grant);
  key_order_.push_back(key);
  while (key_order_.size() > kMaxKeys) {
    keys_.erase(key_order_.front());
    key_order_.pop_front();
  }
  return key;
}

Result<const Grant*> Authorizer::CheckDataKey(std::string_view key) const {
  absl::MutexLock l(&mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    return absl::UnauthenticatedError(
        "unknown data-plane key (say Hello again)");
  }
  return it->second;
}

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  return h == "localhost" || h == "::1" || absl::StartsWith(h, "127.");
}

}  // namespace stagger::server
