#include "server/decoded_chunks.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace stagger::server {
namespace {

// Keeps a cached chunk alive for as long as a buffer over part of it
// lives; gives nothing back itself.
class Pin final : public transport::BufferRecycler {
 public:
  explicit Pin(DecodedChunks::Bytes bytes) : bytes_(std::move(bytes)) {}
  void Recycle(char*, size_t) override {}

 private:
  DecodedChunks::Bytes bytes_;
};

}  // namespace

DecodedChunks::DecodedChunks(size_t max_bytes)
    : max_bytes_(max_bytes), pool_(transport::BufferPool::Create(max_bytes)) {}

Result<DecodedChunks::Bytes> DecodedChunks::Get(
    const std::string& job, const format::ChunkId& id, size_t raw_length,
    size_t serving, const std::function<Result<transport::Buffer>()>& decode) {
  const std::string key = absl::StrCat(job, "/", id.ToHex());
  std::shared_ptr<Entry> e;
  {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      e = it->second;
      ++stats_.hits;
      if (!e->ready) {
        mu_.Await(absl::Condition(
            +[](Entry* x) { return x->ready; }, e.get()));
      }
      if (!e->status.ok()) return e->status;
      Bytes bytes = e->bytes;
      Served(key, e, serving);
      return bytes;
    }
    e = std::make_shared<Entry>();
    entries_[key] = e;
    ++stats_.decodes;
  }
  Result<transport::Buffer> buf = decode();
  Status s = buf.status();
  if (s.ok() && buf->size() != raw_length) {
    s = absl::InternalError(absl::StrCat("chunk ", id.ToHex(), " decoded to ",
                                         buf->size(), " bytes, not ",
                                         raw_length));
  }
  auto bytes = s.ok()
                   ? std::make_shared<const transport::Buffer>(std::move(*buf))
                   : nullptr;
  absl::MutexLock l(&mu_);
  e->ready = true;
  e->status = s;
  if (!s.ok()) {
    entries_.erase(key);  // waiters hold the entry
    return s;
  }
  e->bytes = bytes;
  if (raw_length <= max_bytes_) {
    lru_.push_front(key);
    e->lru = lru_.begin();
    e->kept = true;
    bytes_ += raw_length;
  }
  Served(key, e, serving);
  Evict();
  return bytes;
}

void DecodedChunks::Served(const std::string& key,
                           const std::shared_ptr<Entry>& e, size_t serving) {
  e->served += serving;
  const bool done = e->served >= e->bytes->size();
  if (e->kept && done) {
    bytes_ -= e->bytes->size();
    lru_.erase(e->lru);
    e->kept = false;
  } else if (e->kept) {
    lru_.splice(lru_.begin(), lru_, e->lru);
  }
  if (!e->kept) {
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second == e) entries_.erase(it);
  }
}

void DecodedChunks::Evict() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    auto it = entries_.find(lru_.back());
    bytes_ -= it->second->bytes->size();
    it->second->kept = false;
    entries_.erase(it);
    lru_.pop_back();
  }
}

transport::Buffer DecodedChunks::Slice(const Bytes& bytes, size_t offset,
                                       size_t length) {
  // The transport never writes to a payload it sends.
  char* base = const_cast<char*>(bytes->data()) - bytes->headroom();
  return transport::Buffer::Adopt(base, bytes->headroom() + bytes->capacity(),
                                  length, bytes->headroom() + offset,
                                  std::make_shared<Pin>(bytes));
}

DecodedChunks::Stats DecodedChunks::stats() const {
  absl::MutexLock l(&mu_);
  Stats s = stats_;
  s.bytes = bytes_;
  return s;
}

}  // namespace stagger::server
