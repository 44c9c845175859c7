// WireRate: the rate at which a sender's bytes leave, measured from its
// completions (client/sender.cc feeds it the transport's sent callbacks).
//
// Each completion reports its bytes and the time the wire was busy since
// the previous completion. The estimate is the ratio of the two sums, each
// weighted by exp(-age / time_constant): weights depend on when a
// completion came, not on how many came after it. When completions arrive
// together, the first carries all the busy time and the others none;
// weighting by position, as a per-completion decay does, counts the bytes
// of the later ones more than the time of the first and reads the link as
// faster than it is: five chunks completed together at a decay of 0.8 read
// 64% fast. Measured that way from the server's acknowledgements (one
// group commit answers several chunks), bench/fabric's senders read
// 137-142 MB/s on links that carry 119 and queued 2-3 MiB more before a
// collective than could leave in time.
//
// Thread-safety: none; the caller serializes.
#ifndef STAGGER_CLIENT_WIRE_RATE_H_
#define STAGGER_CLIENT_WIRE_RATE_H_

#include <cstdint>

namespace stagger::client {

class WireRate {
 public:
  explicit WireRate(double time_constant_s = 1.0);

  // `bytes` completed at now_ns; the wire was busy busy_ns since the
  // previous completion (or since it went busy).
  void Add(int64_t now_ns, uint64_t bytes, int64_t busy_ns);

  // Bytes per second; 0 until a completion with busy time.
  double Bps() const;

 private:
  double time_constant_ns_;
  bool any_ = false;
  int64_t last_ns_ = 0;
  double bytes_ = 0;
  double busy_ns_ = 0;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_WIRE_RATE_H_
