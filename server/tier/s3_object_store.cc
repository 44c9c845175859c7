#include "server/tier/s3_object_store.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "util/log.h"

namespace stagger::server::tier {

struct S3ObjectStore::Request {
  const char* method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string key;             // the whole key; "" for the bucket
  std::string query;           // sorted by name, values encoded
  std::string_view body;       // PUT's
  // Where a GET's body goes while it fits (Read); the rest, and all of it
  // when it does not fit, in Response::body.
  transport::Buffer* sink = nullptr;
  std::vector<std::string> headers;
  std::string what;  // for messages: "PUT of 'KEY'"
};

struct S3ObjectStore::Response {
  long status = 0;
  std::string body;
  uint64_t length = 0;                // Content-Length (HEAD)
  int64_t last_modified = -1;         // unix seconds (HEAD)
  double retry_after_s = -1;          // Retry-After, seconds
  std::string etag;                   // ETag (an uploaded part's)
  bool reserve = false;               // reserve the body at its Content-Length
  transport::Buffer* sink = nullptr;  // Request::sink
  size_t sunk = 0;                    // bytes of the body in `sink`
  CURLcode curl = CURLE_OK;
  std::string curl_error;
};

namespace {

std::once_flag curl_once;

// Percent-encodes everything but S3's unreserved characters (and '/' when
// `keep_slash`), hex in upper case, as SigV4's canonical form wants.
std::string Encode(absl::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// The text of every <tag>...</tag> in `xml`, in order, unescaped.
std::vector<std::string> Elements(absl::string_view xml,
                                  absl::string_view tag) {
  std::vector<std::string> out;
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  size_t at = 0;
  while ((at = xml.find(open, at)) != absl::string_view::npos) {
    at += open.size();
    const size_t end = xml.find(close, at);
    if (end == absl::string_view::npos) break;
    out.push_back(
        absl::StrReplaceAll(xml.substr(at, end - at), {{"&lt;", "<"},
                                                       {"&gt;", ">"},
                                                       {"&quot;", "\""},
                                                       {"&apos;", "'"},
                                                       {"&#39;", "'"},
                                                       {"&amp;", "&"}}));
    at = end + close.size();
  }
  return out;
}

std::string First(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> all = Elements(xml, tag);
  return all.empty() ? std::string() : all.front();
}

// S3's bucket naming rules (the common subset of AWS's and RGW's).
bool ValidBucket(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' ||
          c == '.')) {
      return false;
    }
  }
  return absl::ascii_isalnum(b.front()) && absl::ascii_isalnum(b.back());
}

size_t Collect(char* data, size_t size, size_t n, void* out) {
  auto* r = static_cast<S3ObjectStore::Response*>(out);
  const size_t k = size * n;
  if (r->sink != nullptr && r->body.empty()) {
    if (r->sunk + k <= r->sink->capacity()) {
      memcpy(r->sink->data() + r->sunk, data, k);
      r->sunk += k;
      return k;
    }
    r->body.assign(r->sink->data(), r->sunk);  // it does not fit
    r->sunk = 0;
  }
  r->body.append(data, k);
  return k;
}

struct Upload {
  std::string_view bytes;
  size_t at = 0;
};

size_t Feed(char* buf, size_t size, size_t n, void* in) {
  auto* u = static_cast<Upload*>(in);
  const size_t k = std::min(size * n, u->bytes.size() - u->at);
  memcpy(buf, u->bytes.data() + u->at, k);
  u->at += k;
  return k;
}

size_t Header(char* data, size_t size, size_t n, void* out) {
  auto* r = static_cast<S3ObjectStore::Response*>(out);
  absl::string_view line(data, size * n);
  // A GET's body lands in one allocation instead of growing through the
  // 16 KiB pieces curl hands over (restores read chunks of MiBs); not a
  // HEAD's, which has none.
  uint64_t length = 0;
  if (r->reserve && absl::StartsWithIgnoreCase(line, "content-length:") &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length) &&
      length <= (uint64_t{5} << 30)) {
    r->body.reserve(length);
  }
  if (absl::StartsWithIgnoreCase(line, "etag:")) {
    r->etag = std::string(absl::StripAsciiWhitespace(line.substr(5)));
  }
  if (absl::StartsWithIgnoreCase(line, "retry-after:")) {
    double s = -1;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(12)), &s)) {
      r->retry_after_s = s;
    }
  }
  return size * n;
}

bool Retryable(const S3ObjectStore::Response& r) {
  if (r.curl != CURLE_OK) {
    // A TLS certificate refused is a configuration to fix, not a fault
    // that passes.
    return r.curl != CURLE_PEER_FAILED_VERIFICATION &&
           r.curl != CURLE_SSL_CACERT_BADFILE &&
           r.curl != CURLE_URL_MALFORMAT &&
           r.curl != CURLE_UNSUPPORTED_PROTOCOL;
  }
  return r.status == 429 || r.status >= 500;
}

// An answer that refuses the request's credentials: 403, or the 400 that
// S3 gives for an expired or malformed session token.
bool AuthRefused(const S3ObjectStore::Response& r) {
  if (r.curl != CURLE_OK) return false;
  if (r.status == 403) return true;
  const std::string code = First(r.body, "Code");
  return r.status == 400 &&
         (code == "ExpiredToken" || code == "InvalidToken" ||
          code == "TokenRefreshRequired" || code == "InvalidAccessKeyId");
}

}  // namespace

Result<std::unique_ptr<S3ObjectStore>> S3ObjectStore::Open(S3Options o) {
  const bool https = absl::StartsWith(o.endpoint, "https://");
  if (!https && !absl::StartsWith(o.endpoint, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 endpoint '", o.endpoint,
        "' is not a URL: http://HOST[:PORT] or https://HOST[:PORT]"));
  }
  while (absl::EndsWith(o.endpoint, "/")) o.endpoint.pop_back();
  const std::string host = o.endpoint.substr(https ? 8 : 7);
  if (host.empty() || host.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 endpoint '", o.endpoint,
        "' must be a scheme and host only (the bucket is --s3-bucket, a key "
        "prefix --s3-prefix)"));
  }
  if (!ValidBucket(o.bucket)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 bucket '", o.bucket,
        "' is not a valid bucket name (3-63 characters: lower-case letters, "
        "digits, '-' and '.', starting and ending with a letter or digit)"));
  }
  if (o.region.empty()) {
    return absl::InvalidArgumentError(
        "S3 region is empty (us-east-1 where "
        "the store does not care)");
  }
  if (o.part_bytes < (5ull << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 part size ", o.part_bytes, " is below S3's smallest, 5 MiB"));
  }
  if (!(o.timeout_s > 0)) {
    return absl::InvalidArgumentError("S3 request timeout must be positive");
  }
  while (absl::StartsWith(o.prefix, "/")) o.prefix.erase(0, 1);
  while (absl::EndsWith(o.prefix, "/")) o.prefix.pop_back();
  STAGGER_ASSIGN_OR_RETURN(
      S3Credentials c,
      FindS3Credentials(o.env.empty() ? S3Environment() : o.env));
  std::call_once(curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  auto store = std::unique_ptr<S3ObjectStore>(
      new S3ObjectStore(std::move(o), std::move(c)));
  return store;
}

S3ObjectStore::S3ObjectStore(S3Options options, S3Credentials credentials)
    : options_(std::move(options)), credentials_(std::move(credentials)) {
  const bool https = absl::StartsWith(options_.endpoint, "https://");
  const std::string host = options_.endpoint.substr(https ? 8 : 7);
  virtual_host_ =
      options_.addressing == S3Addressing::kVirtualHost ||
      (options_.addressing == S3Addressing::kAuto &&
       absl::EndsWith(host.substr(0, host.rfind(':') == std::string::npos
                                         ? host.size()
                                         : host.rfind(':')),
                      "amazonaws.com"));
  scheme_host_ = virtual_host_ ? absl::StrCat(https ? "https://" : "http://",
                                              options_.bucket, ".", host)
                               : options_.endpoint;
  key_prefix_ = options_.prefix.empty() ? "" : options_.prefix + "/";
}

S3ObjectStore::~S3ObjectStore() {
  absl::MutexLock l(&mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

std::string S3ObjectStore::Describe() const {
  return absl::StrCat("S3 bucket '", options_.bucket, "' at ",
                      options_.endpoint,
                      options_.prefix.empty() ? "" : " prefix '",
                      options_.prefix, options_.prefix.empty() ? "" : "'");
}

std::string S3ObjectStore::Key(const ObjectName& o) const {
  return absl::StrCat(key_prefix_, o.ns, "/", o.name);
}

std::string S3ObjectStore::Url(const std::string& key,
                               const std::string& query) const {
  std::string url = scheme_host_;
  if (!virtual_host_) absl::StrAppend(&url, "/", options_.bucket);
  absl::StrAppend(&url, "/", Encode(key, /*keep_slash=*/true));
  if (!query.empty()) absl::StrAppend(&url, "?", query);
  return url;
}

void* S3ObjectStore::TakeHandle() {
  {
    absl::MutexLock l(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3ObjectStore::GiveBack(void* h) {
  absl::MutexLock l(&mu_);
  idle_.push_back(h);
}

S3ObjectStore::Response S3ObjectStore::Attempt(void* handle, const Request& r) {
  CURL* h = static_cast<CURL*>(handle);
  Response resp;
  curl_easy_reset(h);
  const std::string url = Url(r.key, r.query);
  const std::string sigv4 = absl::StrCat("aws:amz:", options_.region, ":s3");
  const S3Credentials credentials = Credentials();
  const std::string user =
      absl::StrCat(credentials.access_key, ":", credentials.secret_key);
  curl_slist* headers = nullptr;
  headers =
      curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  std::string token;
  if (!credentials.session_token.empty()) {
    token = "x-amz-security-token: " + credentials.session_token;
    headers = curl_slist_append(headers, token.c_str());
  }
  for (const std::string& extra : r.headers) {
    headers = curl_slist_append(headers, extra.c_str());
  }
  char error[CURL_ERROR_SIZE] = {0};
  Upload upload{r.body, 0};
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERPWD, user.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // A large PUT's "Expect: 100-continue" is sent (removing it with an empty
  // header breaks curl's signature: it signs the empty header it does not
  // send), but the body follows at once instead of after a wait.
  curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(options_.timeout_s * 1000));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, Header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &resp);
  curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  const absl::string_view method = r.method;
  resp.sink = r.sink;
  resp.reserve = method == "GET" && r.sink == nullptr;
  if (method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, Feed);
    curl_easy_setopt(h, CURLOPT_READDATA, &upload);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(r.body.size()));
  } else if (method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(r.body.size()));
  } else if (method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method);
  }
  resp.curl = curl_easy_perform(h);
  if (resp.curl != CURLE_OK) {
    resp.curl_error = error[0] != 0 ? error : curl_easy_strerror(resp.curl);
  } else {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
    curl_off_t length = 0, filetime = -1;
    if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) ==
            CURLE_OK &&
        length > 0) {
      resp.length = static_cast<uint64_t>(length);
    }
    if (curl_easy_getinfo(h, CURLINFO_FILETIME_T, &filetime) == CURLE_OK) {
      resp.last_modified = filetime;
    }
  }
  curl_slist_free_all(headers);
  return resp;
}

Result<S3ObjectStore::Response> S3ObjectStore::Send(const Request& r) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.timeout_s));
  thread_local std::mt19937_64 rng(std::random_device{}());
  double backoff_s = 0.05;
  void* h = TakeHandle();
  if (h == nullptr)
    return absl::ResourceExhaustedError("curl_easy_init failed");
  Response resp;
  // A store that answers a request with a body before reading all of it
  // (an error, a refusal) may leave the rest on the connection, where it
  // would be read as the start of the next request (radosgw: 405). Such a
  // handle, and the connections it caches, is dropped for a fresh one.
  auto once = [&] {
    resp = Attempt(h, r);
    if (!r.body.empty() && (resp.curl != CURLE_OK || resp.status / 100 != 2)) {
      curl_easy_cleanup(static_cast<CURL*>(h));
      h = curl_easy_init();
    }
  };
  for (int attempt = 0; h != nullptr; ++attempt) {
    once();
    if (!Retryable(resp) || h == nullptr) break;
    double wait_s =
        backoff_s * std::uniform_real_distribution<double>(0.5, 1)(rng);
    if (resp.retry_after_s >= 0) wait_s = std::max(wait_s, resp.retry_after_s);
    backoff_s = std::min(2.0, backoff_s * 2);
    if (Clock::now() + std::chrono::duration<double>(wait_s) >= deadline) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
  }
  // Refused credentials (expired temporary ones, say): once, with those
  // found now if they changed (a credentials file rewritten by whatever
  // refreshes it). Never more: a refusal is not retried.
  if (h != nullptr && AuthRefused(resp) && ReloadCredentials()) once();
  if (h != nullptr) GiveBack(h);
  if (resp.curl != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(r.what, " in ", Describe(), ": ", resp.curl_error,
                     " (gave up after ", options_.timeout_s, " s)"));
  }
  if (Retryable(resp)) {
    return absl::UnavailableError(
        absl::StrCat(r.what, " in ", Describe(), ": HTTP ", resp.status, " ",
                     First(resp.body, "Code"), " (gave up after ",
                     options_.timeout_s, " s)"));
  }
  return resp;
}

S3Credentials S3ObjectStore::Credentials() const {
  absl::MutexLock l(&credentials_mu_);
  return credentials_;
}

bool S3ObjectStore::ReloadCredentials() {
  Result<S3Credentials> found =
      FindS3Credentials(options_.env.empty() ? S3Environment() : options_.env);
  if (!found.ok()) return false;
  absl::MutexLock l(&credentials_mu_);
  if (found->access_key == credentials_.access_key &&
      found->secret_key == credentials_.secret_key &&
      found->session_token == credentials_.session_token) {
    return false;
  }
  credentials_ = std::move(*found);
  log::Info("stagger-server", absl::StrCat(Describe(),
                                           ": refused the credentials in use; "
                                           "trying those now in ",
                                           credentials_.source));
  return true;
}

Status S3ObjectStore::Failed(const Response& resp,
                             const std::string& what) const {
  const std::string code = First(resp.body, "Code");
  const std::string said =
      absl::StrCat("HTTP ", resp.status, code.empty() ? "" : " ", code);
  if (AuthRefused(resp)) {
    const S3Credentials c = Credentials();
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": ", Describe(), " refused the request (", said,
        "): check the credentials from ", c.source,
        c.session_token.empty() ? ""
                                : " (temporary: their session token may "
                                  "have expired)",
        " and their access to the bucket",
        c.from_file
            ? "; the file is read again on the next refusal"
            : "; credentials from the environment are read at start only"));
  }
  if (code == "NoSuchBucket") {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", Describe(), " does not exist (", said, ")"));
  }
  if (resp.status == 404) {
    return absl::NotFoundError(
        absl::StrCat(what, " in ", Describe(), ": ", said));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " in ", Describe(), ": ", said, " ", First(resp.body, "Message")));
}

Result<bool> S3ObjectStore::PutParts(const std::string& key,
                                     std::string_view bytes, bool conditional) {
  const std::string what = absl::StrCat("multipart upload of '", key, "'");
  if (conditional) {
    Request head;
    head.method = "HEAD";
    head.key = key;
    head.what = what;
    STAGGER_ASSIGN_OR_RETURN(Response resp, Send(head));
    if (resp.status / 100 == 2) return false;
    if (resp.status != 404) return Failed(resp, what);
  }
  Request start;
  start.method = "POST";
  start.key = key;
  start.query = "uploads=";
  start.headers = {"Content-Type: application/octet-stream"};
  start.what = what;
  STAGGER_ASSIGN_OR_RETURN(Response started, Send(start));
  if (started.status / 100 != 2) return Failed(started, what);
  const std::string id = First(started.body, "UploadId");
  if (id.empty()) {
    return absl::UnavailableError(
        absl::StrCat(what, " in ", Describe(), ": no UploadId in the answer"));
  }
  const std::string upload = absl::StrCat("uploadId=", Encode(id, false));
  // Aborts the upload (best effort: a bucket lifecycle rule is the
  // backstop) and returns `s`.
  auto abort = [&](Status s) {
    Request stop;
    stop.method = "DELETE";
    stop.key = key;
    stop.query = upload;
    stop.what = what;
    (void)Send(stop);
    return s;
  };
  std::string complete = "<CompleteMultipartUpload>";
  const uint64_t part = options_.part_bytes;
  for (uint64_t at = 0, n = 1; at < bytes.size(); at += part, ++n) {
    Request put;
    put.method = "PUT";
    put.key = key;
    put.query = absl::StrCat("partNumber=", n, "&", upload);
    put.body = bytes.substr(at, std::min<uint64_t>(part, bytes.size() - at));
    put.what = absl::StrCat(what, " part ", n);
    Result<Response> resp = Send(put);
    if (!resp.ok()) return abort(resp.status());
    if (resp->status / 100 != 2) return abort(Failed(*resp, put.what));
    absl::StrAppend(&complete, "<Part><PartNumber>", n, "</PartNumber><ETag>",
                    resp->etag, "</ETag></Part>");
  }
  absl::StrAppend(&complete, "</CompleteMultipartUpload>");
  Request finish;
  finish.method = "POST";
  finish.key = key;
  finish.query = upload;
  finish.body = complete;
  finish.headers = {"Content-Type: application/xml"};
  finish.what = what;
  Result<Response> done = Send(finish);
  if (!done.ok()) return abort(done.status());
  // S3 may answer 200 and put the error in the body.
  if (done->status / 100 != 2 ||
      done->body.find("<Error>") != std::string::npos) {
    if (done->status / 100 == 2) done->status = 500;
    return abort(Failed(*done, what));
  }
  return true;
}

Status S3ObjectStore::Put(const ObjectName& o, std::string_view bytes) {
  if (bytes.size() > options_.part_bytes) {
    return PutParts(Key(o), bytes, /*conditional=*/false).status();
  }
  Request r;
  r.method = "PUT";
  r.key = Key(o);
  r.body = bytes;
  r.what = absl::StrCat("PUT of '", r.key, "'");
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status / 100 == 2) return absl::OkStatus();
  return Failed(resp, r.what);
}

Result<bool> S3ObjectStore::PutNew(const ObjectName& o,
                                   std::string_view bytes) {
  if (bytes.size() > options_.part_bytes) {
    return PutParts(Key(o), bytes, /*conditional=*/true);
  }
  Request r;
  r.method = "PUT";
  r.key = Key(o);
  r.body = bytes;
  r.headers = {"If-None-Match: *"};
  r.what = absl::StrCat("conditional PUT of '", r.key, "'");
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status / 100 == 2) return true;
  // 412: it exists. 409 (ConditionalRequestConflict): another writer's
  // create of the same key is under way; it will exist.
  if (resp.status == 412 || resp.status == 409) return false;
  return Failed(resp, r.what);
}

Result<std::string> S3ObjectStore::Get(const ObjectName& o) {
  Request r;
  r.key = Key(o);
  r.what = absl::StrCat("GET of '", r.key, "'");
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status / 100 == 2) return std::move(resp.body);
  return Failed(resp, r.what);
}

Result<transport::Buffer> S3ObjectStore::Read(const ObjectName& o,
                                              transport::Buffer out) {
  const uint64_t size = out.size();
  Request r;
  r.key = Key(o);
  r.what = absl::StrCat("GET of '", r.key, "'");
  r.sink = &out;
  // Only what is asked for (a record's header, say); a range past the end
  // is answered with what there is.
  if (size > 0) r.headers = {absl::StrCat("Range: bytes=0-", size - 1)};
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status / 100 != 2) {
    if (resp.body.empty()) resp.body.assign(out.data(), resp.sunk);
    return Failed(resp, r.what);
  }
  if (!resp.body.empty()) return transport::Buffer::CopyOf(resp.body);
  out.resize(resp.sunk);
  return out;
}

Result<std::optional<ObjectInfo>> S3ObjectStore::Stat(const ObjectName& o) {
  Request r;
  r.method = "HEAD";
  r.key = Key(o);
  r.what = absl::StrCat("HEAD of '", r.key, "'");
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status == 404) return std::optional<ObjectInfo>();
  if (resp.status / 100 != 2) return Failed(resp, r.what);
  ObjectInfo info;
  info.size = resp.length;
  info.written_unix_s = resp.last_modified;
  return std::optional<ObjectInfo>(info);
}

Status S3ObjectStore::Remove(const ObjectName& o) {
  Request r;
  r.method = "DELETE";
  r.key = Key(o);
  r.what = absl::StrCat("DELETE of '", r.key, "'");
  STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
  if (resp.status / 100 == 2 || resp.status == 404) return absl::OkStatus();
  return Failed(resp, r.what);
}

Result<std::vector<std::string>> S3ObjectStore::ListKeys(
    const std::string& key_prefix, bool delimiter) {
  std::vector<std::string> out;
  std::string token;
  while (true) {
    Request r;
    // The query's parameters in name order (SigV4's canonical order).
    r.query =
        token.empty()
            ? ""
            : absl::StrCat("continuation-token=", Encode(token, false), "&");
    if (delimiter) absl::StrAppend(&r.query, "delimiter=%2F&");
    absl::StrAppend(&r.query, "list-type=2&prefix=", Encode(key_prefix, false));
    r.what = absl::StrCat("listing of '", key_prefix, "'");
    STAGGER_ASSIGN_OR_RETURN(Response resp, Send(r));
    if (resp.status / 100 != 2) return Failed(resp, r.what);
    if (delimiter) {
      for (const std::string& group : Elements(resp.body, "CommonPrefixes")) {
        out.push_back(First(group, "Prefix"));
      }
    } else {
      for (std::string& key : Elements(resp.body, "Key")) {
        out.push_back(std::move(key));
      }
    }
    if (First(resp.body, "IsTruncated") != "true") break;
    token = First(resp.body, "NextContinuationToken");
    if (token.empty()) {
      return absl::DataLossError(
          absl::StrCat(r.what, " in ", Describe(),
                       ": a truncated page without a continuation token"));
    }
  }
  return out;
}

Result<std::vector<std::string>> S3ObjectStore::List(
    const std::string& ns, const std::string& prefix) {
  const std::string base = absl::StrCat(key_prefix_, ns, "/");
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                           ListKeys(base + prefix, /*delimiter=*/false));
  for (std::string& k : keys) k.erase(0, base.size());
  return keys;
}

Result<std::vector<std::string>> S3ObjectStore::Namespaces() {
  STAGGER_ASSIGN_OR_RETURN(std::vector<std::string> groups,
                           ListKeys(key_prefix_, /*delimiter=*/true));
  std::vector<std::string> out;
  for (std::string& g : groups) {
    if (!absl::StartsWith(g, key_prefix_) || !absl::EndsWith(g, "/")) continue;
    out.push_back(
        g.substr(key_prefix_.size(), g.size() - key_prefix_.size() - 1));
  }
  return out;
}

}  // namespace stagger::server::tier
