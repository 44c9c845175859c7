// Sender: puts encoded chunks on the data plane in the order they are
// queued, at most `max_inflight` unacknowledged at once.
//
// Without shaping, a chunk is sent from the thread that queues it (or from
// the transport thread that completes an earlier one). With shaping
// (client/shaping.h), a sender thread of its own takes chunks in order and
// sends each only once the pacer, the caps and the collective gate allow
// it; while a learned collective window is coming, it also waits until the
// bytes it sent earlier (estimated from the measured link rate) and this
// chunk can leave before the window closes, so that queued bytes do not
// delay the collective.
//
// It measures the wire: bytes that left over the time they took (from the
// transport's sent callbacks), fed to the shaping as the link rate; and
// bytes acknowledged against their latency, fed to the codec policy.
//
// Thread-safety: thread-safe. The destructor sends every queued chunk
// (their callbacks run) and then stops the thread.
#ifndef STAGGER_CLIENT_SENDER_H_
#define STAGGER_CLIENT_SENDER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "client/codec_policy.h"
#include "client/server_set.h"
#include "client/shaping.h"
#include "client/wire_rate.h"

namespace stagger::client {

struct SendItem {
  ServerConn* server = nullptr;
  std::string header;
  std::string_view payload;
  std::shared_ptr<std::string> owned;  // the payload, when encoded
  uint64_t raw_bytes = 0;              // what the chunk holds decoded
  std::string what;                    // for error messages
  std::function<void(const Status&)> done;
};

class Sender {
 public:
  // `policy` and `shaping` may be null; neither is owned.
  Sender(size_t max_inflight, CodecPolicy* policy, Shaping* shaping);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  void Enqueue(SendItem item);

  // Times the shaped sender held a chunk back because no payload had left
  // yet (the link rate unknown: one chunk at a time measures it).
  uint64_t probe_waits() const;

 private:
  void Send(std::shared_ptr<SendItem> item);
  void OnSendDone(size_t wire_bytes, int64_t latency_ns);
  // A sent chunk's payload left (wire_bytes), or its call failed first (0).
  void OnWireLeft(size_t wire_bytes);
  void ShapedLoop();
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_inflight_;
  CodecPolicy* const policy_;
  Shaping* const shaping_;

  mutable absl::Mutex mu_;
  std::deque<SendItem> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t probe_waits_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Chunks handed to the transport whose payload has not left yet; since
  // when the wire has been busy with them without a break, or when the
  // last one left within that stretch.
  size_t unsent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wire_mark_ns_ ABSL_GUARDED_BY(mu_) = 0;
  WireRate wire_rate_ ABSL_GUARDED_BY(mu_);
  double wire_bytes_sum_ ABSL_GUARDED_BY(mu_) = 0;  // decayed, see .cc
  // Decayed sum of chunk latencies (send to ack, ns), over the same
  // completions as wire_bytes_sum_.
  double latency_sum_ ABSL_GUARDED_BY(mu_) = 0;
  // When the link would have carried everything sent so far, at wire_rate_
  // (shaped sends only).
  int64_t wire_free_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // with shaping only
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SENDER_H_
