// TokenBucket: a hard byte-rate cap (the operator's per-client or per-node
// limit), implemented as GCRA, the generic cell rate algorithm.
//
// GCRA keeps one number, the theoretical arrival time (TAT): the time at
// which the bytes booked so far would have finished going out at exactly
// `rate`. Booking `n` bytes at time `now` moves the TAT to
// max(TAT, now) + n / rate, and the bytes may go once the new TAT is at most
// `burst / rate` ahead of the time they go:
//
//   send_at = max(now, max(TAT, now) + n / rate - burst / rate)
//
// An idle bucket therefore lets `burst` bytes through at once, and over any
// interval the bytes booked never exceed rate * interval + burst (plus one
// request larger than the burst, which waits for its excess). All state is
// one std::atomic<int64_t> updated by compare-and-swap, so the same algorithm
// runs over a 64-bit word in shared memory: SharedTokenBucket maps such a
// word from a file under /dev/shm and caps all processes of a node together.
//
// Time is passed in by the caller (see qos/clock.h); the bucket never reads
// a clock. Processes sharing a bucket must use the same time axis
// (RealClock, CLOCK_MONOTONIC) and the same rate and burst.
//
// Thread-safety: Reserve is lock-free and safe from any thread and, for a
// SharedTokenBucket, from any process. Rate and burst are fixed at
// construction.
#ifndef STAGGER_QOS_TOKEN_BUCKET_H_
#define STAGGER_QOS_TOKEN_BUCKET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "stagger/status.h"

namespace stagger::qos {

class TokenBucket {
 public:
  // `rate_Bps` bytes per second; 0 (or negative, or not finite) means
  // unlimited. `burst_bytes` may go at once from an idle bucket; 0 makes the
  // bucket a strict pacer.
  TokenBucket(double rate_Bps, uint64_t burst_bytes);
  virtual ~TokenBucket() = default;
  TokenBucket(const TokenBucket&) = delete;
  TokenBucket& operator=(const TokenBucket&) = delete;

  // Books `bytes` and returns the time at which they may go: `now_ns` when
  // allowed at once, later when the cap requires waiting. The caller is
  // expected to wait until then; the booking stands even if it does not
  // send. Unlimited buckets return now_ns and book nothing.
  int64_t Reserve(int64_t now_ns, uint64_t bytes);
  // The time Reserve(now_ns, bytes) would return, without booking.
  int64_t Peek(int64_t now_ns, uint64_t bytes) const;

  bool unlimited() const { return ns_per_byte_ == 0; }
  double rate_Bps() const { return rate_Bps_; }
  uint64_t burst_bytes() const { return burst_bytes_; }
  // The current theoretical arrival time (observability and tests).
  int64_t theoretical_arrival_ns() const;

 protected:
  // A bucket whose state lives in `*tat`, a lock-free word that may be
  // shared between processes; it must outlive the bucket.
  TokenBucket(double rate_Bps, uint64_t burst_bytes, std::atomic<int64_t>* tat);

 private:
  // Nanoseconds that `bytes` take at the rate, saturated far below
  // INT64_MAX so that sums of times cannot overflow.
  int64_t CostNs(uint64_t bytes) const;
  int64_t SendAt(int64_t now_ns, int64_t tat, int64_t cost_ns,
                 int64_t* new_tat) const;

  double rate_Bps_ = 0;
  uint64_t burst_bytes_ = 0;
  double ns_per_byte_ = 0;  // 0 = unlimited
  int64_t tolerance_ns_ = 0;
  std::atomic<int64_t> own_tat_{0};
  std::atomic<int64_t>* tat_;
};

// A TokenBucket whose TAT lives in a small file mapped into memory, so that
// every process on a node that opens the same path shares one cap. The file
// holds a magic number and the TAT word, nothing else; a zero-filled file is
// a valid idle bucket, so openers need no start-up handshake. The file
// outlives the processes (it is how the next job finds the cap state); the
// operator removes it, e.g. on reboot with /dev/shm.
//
// Thread- and process-safe like TokenBucket.
class SharedTokenBucket final : public TokenBucket {
 public:
  // The conventional path of the node-wide bucket named `node_name`:
  // "/dev/shm/stagger-node-<node_name>". INVALID_ARGUMENT unless the name
  // matches [A-Za-z0-9._-]{1,128}.
  static Result<std::string> NodePath(std::string_view node_name);

  // Opens (creating if absent, mode 0600) the bucket file at `path` and maps
  // it. Errors: INVALID_ARGUMENT for an empty path; NOT_FOUND when the
  // directory does not exist; FAILED_PRECONDITION when the file cannot be
  // opened or mapped, or holds something other than a stagger token bucket.
  static Result<std::unique_ptr<SharedTokenBucket>> Open(std::string_view path,
                                                         double rate_Bps,
                                                         uint64_t burst_bytes);

  ~SharedTokenBucket() override;

  const std::string& path() const { return path_; }

 private:
  SharedTokenBucket(std::string path, void* map, size_t map_size,
                    double rate_Bps, uint64_t burst_bytes,
                    std::atomic<int64_t>* tat);

  std::string path_;
  void* map_;
  size_t map_size_;
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_TOKEN_BUCKET_H_
