// Buffer: an owned, 4 KiB-aligned byte buffer, the unit payloads travel in.
// Move-only. Not thread-safe (one owner at a time).
#ifndef STAGGER_TRANSPORT_BUFFER_H_
#define STAGGER_TRANSPORT_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

namespace stagger::transport {

class Buffer {
 public:
  static constexpr size_t kAlignment = 4096;

  Buffer() = default;
  // Allocates `size` bytes (uninitialised), aligned to kAlignment; capacity
  // is rounded up to a multiple of kAlignment. Aborts only if the process is
  // out of memory, like operator new.
  explicit Buffer(size_t size) : size_(size) {
    if (size == 0) return;
    capacity_ = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, capacity_);
    if (p == nullptr) std::abort();
    data_.reset(static_cast<char*>(p));
  }
  static Buffer CopyOf(std::string_view bytes) {
    Buffer b(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
    return b;
  }

  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_.get(), size_}; }
  // Shrinks (never grows past capacity) the logical size.
  void resize(size_t n) {
    if (n <= capacity_) size_ = n;
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_BUFFER_H_
