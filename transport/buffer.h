// Buffer: an owned, 4 KiB-aligned byte buffer, the unit payloads travel in
// (aligned at data(), or at data() - headroom() for WithHeadroom).
// Move-only. Not thread-safe (one owner at a time).
//
// A buffer may carry an Attachment that lives exactly as long as its memory:
// the transport attaches the admission charge of a received payload
// (transport.h, PullAdmission), so the charge ends when the bytes are freed,
// wherever the buffer went.
#ifndef STAGGER_TRANSPORT_BUFFER_H_
#define STAGGER_TRANSPORT_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

namespace stagger::transport {

// Takes back the memory of a Buffer made by Buffer::Adopt (a pool).
class BufferRecycler {
 public:
  virtual ~BufferRecycler() = default;
  // `block` bytes at `p`, as given to Adopt.
  virtual void Recycle(char* p, size_t block) = 0;
};

// Frees a Buffer's memory: back to its recycler, or std::free.
struct BufferFree {
  std::shared_ptr<BufferRecycler> recycler;  // nullptr: std::free
  size_t block = 0;                          // bytes of the allocation
  bool borrowed = false;                     // Buffer::Borrow: not ours
  void operator()(char* p) const {
    if (borrowed) return;
    if (recycler) {
      recycler->Recycle(p, block);
    } else {
      std::free(p);
    }
  }
};

class Buffer {
 public:
  static constexpr size_t kAlignment = 4096;

  // Destroyed right after the memory it is attached to is freed.
  class Attachment {
   public:
    virtual ~Attachment() = default;
  };

  Buffer() = default;
  Buffer(Buffer&& other) noexcept
      : attachment_(std::move(other.attachment_)),
        data_(std::move(other.data_)),
        headroom_(std::exchange(other.headroom_, 0)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Buffer old(std::move(*this));  // freed, then detached, on return
      attachment_ = std::move(other.attachment_);
      data_ = std::move(other.data_);
      headroom_ = std::exchange(other.headroom_, 0);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  // Allocates `size` bytes (uninitialised), aligned to kAlignment; capacity
  // is rounded up to a multiple of kAlignment. Aborts only if the process is
  // out of memory, like operator new.
  explicit Buffer(size_t size) : Buffer(size, 0) {}
  // `size` bytes placed `headroom` bytes into an allocation that starts on
  // a kAlignment boundary and is a multiple of it: room for a header to be
  // written in front of the bytes without moving them (the segment store
  // writes a received chunk and its record header to disk this way).
  static Buffer WithHeadroom(size_t size, size_t headroom) {
    return Buffer(size, headroom);
  }
  // A buffer over `block` bytes at `p` (kAlignment-aligned, a multiple of
  // it) that `recycler` owns: they go back to it when the buffer dies.
  static Buffer Adopt(char* p, size_t block, size_t size, size_t headroom,
                      std::shared_ptr<BufferRecycler> recycler) {
    Buffer b;
    b.data_ = std::unique_ptr<char, Free>(p, Free{std::move(recycler), block});
    b.headroom_ = headroom;
    b.size_ = size;
    b.capacity_ = block - headroom;
    return b;
  }
  // A buffer over `size` bytes at `p` that it does not own (no alignment
  // asked): the memory must outlive it and is never freed by it. What a
  // reply is received into when its caller named the place
  // (Connection::CallInto).
  static Buffer Borrow(char* p, size_t size) {
    Buffer b;
    b.data_ = std::unique_ptr<char, Free>(p, Free{nullptr, size, true});
    b.size_ = size;
    b.capacity_ = size;
    return b;
  }
  bool borrowed() const { return data_.get_deleter().borrowed; }
  static Buffer CopyOf(std::string_view bytes) {
    Buffer b(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
    return b;
  }

  char* data() { return data_.get() + headroom_; }
  const char* data() const { return data_.get() + headroom_; }
  size_t size() const { return size_; }
  // Bytes from data() to the end of the allocation.
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data(), size_}; }
  // Bytes in front of data() (WithHeadroom); data() - headroom() is
  // kAlignment-aligned and the allocation is headroom() + capacity() bytes.
  size_t headroom() const { return headroom_; }
  // Shrinks (never grows past capacity) the logical size.
  void resize(size_t n) {
    if (n <= capacity_) size_ = n;
  }
  // Gives the first min(n, size()) bytes to the headroom: data() moves
  // forward without a copy (a record read whole from disk is sent without
  // its header this way).
  void DropFront(size_t n) {
    n = n < size_ ? n : size_;
    headroom_ += n;
    size_ -= n;
    capacity_ -= n;
  }

  // Replaces the attachment (the old one, if any, is destroyed now).
  void Attach(std::unique_ptr<Attachment> attachment) {
    attachment_ = std::move(attachment);
  }

 private:
  Buffer(size_t size, size_t headroom) : size_(size) {
    if (size == 0 && headroom == 0) return;
    const size_t block =
        (headroom + size + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, block);
    if (p == nullptr) std::abort();
    data_.reset(static_cast<char*>(p));
    headroom_ = headroom;
    capacity_ = block - headroom;
  }

  using Free = BufferFree;
  // Declared before data_: members die in reverse order, so the memory is
  // freed first.
  std::unique_ptr<Attachment> attachment_;
  std::unique_ptr<char, Free> data_;  // the allocation, headroom first
  size_t headroom_ = 0;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_BUFFER_H_
