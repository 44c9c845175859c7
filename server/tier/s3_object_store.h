// S3ObjectStore: an ObjectStore over an S3-compatible object store (AWS
// S3, Ceph RGW, MinIO, GCS's XML API) through libcurl, which signs each
// request (CURLOPT_AWS_SIGV4). Objects are keys "PREFIX/JOB/NAME" of one
// bucket; a namespace is a job's key prefix.
//
// - Credentials: s3_credentials.h (environment, ~/.aws/credentials).
// - Requests: a pool of curl handles, each keeping its connections
//   (connection reuse; calls on several threads run in parallel). Payloads
//   are sent as UNSIGNED-PAYLOAD: the signature covers the request, not
//   the bytes (every record carries its own CRC, checked on every read).
// - Retries: connection failures, timeouts, 5xx and 429 are repeated with
//   backoff (50 ms doubling to 2 s, with jitter; a Retry-After in seconds
//   is honored) until the request's budget (timeout_s) is spent, then
//   UNAVAILABLE. A refusal of the credentials (403) is PERMISSION_DENIED
//   at once, naming the bucket and where the credentials came from; a
//   missing bucket is FAILED_PRECONDITION; neither is repeated.
// - PutNew sends If-None-Match: * (a conditional create: AWS S3 since
//   2024, RGW, MinIO); 412 means the object exists.
// - An object larger than part_bytes is a multipart upload (parts of
//   part_bytes, each PUT with its own retries; aborted when a part or the
//   completion fails, so no stray parts are billed). A conditional create
//   that goes multipart checks first (HEAD) and then writes: the objects
//   the drain creates are named by their content or written by one server,
//   so two writers of one name write the same bytes.
// Open does not contact the store: a server starts while it is down, and
// its drain catches up later.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_SERVER_TIER_S3_OBJECT_STORE_H_
#define STAGGER_SERVER_TIER_S3_OBJECT_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/tier/object_store.h"
#include "server/tier/s3_credentials.h"

namespace stagger::server::tier {

enum class S3Addressing {
  kAuto,         // virtual-host for *.amazonaws.com, else path
  kPath,         // ENDPOINT/BUCKET/KEY (RGW, MinIO)
  kVirtualHost,  // BUCKET.HOST/KEY
};

struct S3Options {
  // "https://s3.eu-west-1.amazonaws.com", "http://127.0.0.1:7480".
  std::string endpoint;
  std::string bucket;
  // Key prefix inside the bucket ("" or e.g. "team/ckpt"); a '/' follows.
  std::string prefix;
  std::string region = "us-east-1";
  // PEM bundle to trust for https; empty: the system's CAs.
  std::string ca_file;
  S3Addressing addressing = S3Addressing::kAuto;
  // A request's whole budget, its retries included.
  double timeout_s = 30;
  // Objects above this many bytes go as multipart uploads of parts this
  // size (at least 5 MiB, S3's smallest part).
  uint64_t part_bytes = 64ull << 20;
  // Where credentials are looked for (S3Environment() when empty).
  std::map<std::string, std::string> env;
};

class S3ObjectStore final : public ObjectStore {
 public:
  // INVALID_ARGUMENT for an endpoint that is not http(s)://HOST[:PORT], a
  // bucket name S3 would refuse, a region that is empty; the credentials'
  // errors (NOT_FOUND, INVALID_ARGUMENT). Does not connect.
  static Result<std::unique_ptr<S3ObjectStore>> Open(S3Options options);
  ~S3ObjectStore() override;

  Status Put(const ObjectName& o, std::string_view bytes) override;
  Result<bool> PutNew(const ObjectName& o, std::string_view bytes) override;
  Result<std::string> Get(const ObjectName& o) override;
  Result<transport::Buffer> Read(const ObjectName& o,
                                 transport::Buffer into) override;
  Result<std::optional<ObjectInfo>> Stat(const ObjectName& o) override;
  Status Remove(const ObjectName& o) override;
  Result<std::vector<std::string>> List(const std::string& ns,
                                        const std::string& prefix) override;
  Result<std::vector<std::string>> Namespaces() override;
  std::string Describe() const override;

  struct Response;
  struct Request;

 private:
  S3ObjectStore(S3Options options, S3Credentials credentials);
  // Runs `r` with retries; the final response (any status) or an error
  // when no response came within the budget.
  Result<Response> Send(const Request& r);
  // One attempt on handle `h`.
  Response Attempt(void* h, const Request& r);
  // The status for a response that is not 2xx (nor one the caller
  // handles), naming `what`.
  Status Failed(const Response& resp, const std::string& what) const;
  // Looks for the credentials again (a refreshed credentials file, say);
  // whether they differ from those in use, which they then replace.
  bool ReloadCredentials();
  S3Credentials Credentials() const;
  // Keys of `key_prefix` (ListObjectsV2, every page); with `delimiter`,
  // the common prefixes instead.
  Result<std::vector<std::string>> ListKeys(const std::string& key_prefix,
                                            bool delimiter);
  // A multipart upload of `bytes` to `key` (see above); false when
  // `conditional` and the object exists.
  Result<bool> PutParts(const std::string& key, std::string_view bytes,
                        bool conditional);
  std::string Key(const ObjectName& o) const;
  std::string Url(const std::string& key, const std::string& query) const;
  void* TakeHandle();
  void GiveBack(void* h);

  const S3Options options_;
  mutable absl::Mutex credentials_mu_;
  S3Credentials credentials_ ABSL_GUARDED_BY(credentials_mu_);
  std::string scheme_host_;  // "http://127.0.0.1:7480"
  bool virtual_host_ = false;
  std::string key_prefix_;  // options_.prefix + "/" (or "")
  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);  // CURL*
};

}  // namespace stagger::server::tier

#endif  // STAGGER_SERVER_TIER_S3_OBJECT_STORE_H_
