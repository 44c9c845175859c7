#include "client/sender.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "format/data_plane.h"
#include "qos/clock.h"

namespace stagger::client {
namespace {

int64_t NowNs() { return qos::RealClock::Get()->NowNs(); }

// The codec policy's estimate (Little's law below) weighs recent
// completions by count, each older one kDecay times less: bytes and
// latency come with every completion alike.
constexpr double kDecay = 0.8;
// The link rate (client/wire_rate.h) is measured from the transport's
// sent callbacks, not from the replies: a reply also waits for the
// server's write and fsync, and one group commit answers several chunks at
// once. Time constant: a few iterations of a training loop's idle windows.
constexpr double kWireRateTimeConstantS = 1.0;

}  // namespace

Sender::Sender(size_t max_inflight, CodecPolicy* policy, Shaping* shaping)
    : max_inflight_(max_inflight == 0 ? 1 : max_inflight),
      policy_(policy),
      shaping_(shaping),
      wire_rate_(kWireRateTimeConstantS) {
  if (shaping_ != nullptr) thread_ = std::thread([this] { ShapedLoop(); });
}

Sender::~Sender() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // Completions still to come call back into this object.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* n) { return *n == 0; }, &in_flight_));
}

void Sender::Enqueue(SendItem item) {
  {
    absl::MutexLock lock(&mu_);
    if (shaping_ != nullptr || in_flight_ >= max_inflight_) {
      queue_.push_back(std::move(item));
      return;
    }
    ++in_flight_;
  }
  Send(std::make_shared<SendItem>(std::move(item)));
}

void Sender::Send(std::shared_ptr<SendItem> p) {
  const size_t wire_bytes = p->header.size() + p->payload.size();
  const int64_t sent_ns = NowNs();
  {
    absl::MutexLock lock(&mu_);
    if (unsent_++ == 0) wire_mark_ns_ = sent_ns;
  }
  // Sent and reply callbacks run one after the other on the transport's
  // thread; a call that fails before its payload left has no sent one.
  auto left = std::make_shared<bool>(false);
  std::shared_ptr<transport::Connection> data = p->server->Data();
  if (data == nullptr) {
    OnWireLeft(0);
    p->done(
        WithContext(absl::UnavailableError(absl::StrCat(
                        "server ", p->server->address, " is not connected")),
                    p->what));
    OnSendDone(0, 0);  // nothing crossed the wire: no rate sample
    return;
  }
  data->Call(
      static_cast<uint16_t>(format::DataOp::kPutChunk), p->header, p->payload,
      [this, p, wire_bytes, sent_ns, left](Result<transport::Message> reply) {
        if (!*left) OnWireLeft(0);
        Status s = reply.status();
        if (s.ok()) {
          auto r = format::DecodeReply(reply->header);
          s = r.ok() ? r->status : r.status();
        }
        p->done(WithContext(s, p->what));
        OnSendDone(wire_bytes, NowNs() - sent_ns);
      },
      [this, wire_bytes, left] {
        *left = true;
        OnWireLeft(wire_bytes);
      });
}

void Sender::OnWireLeft(size_t wire_bytes) {
  absl::MutexLock lock(&mu_);
  // The wire was busy from the mark to now and carried these bytes.
  const int64_t now = NowNs();
  if (wire_bytes > 0) {
    wire_rate_.Add(now, wire_bytes, now - wire_mark_ns_);
    if (shaping_ != nullptr && wire_rate_.Bps() > 0) {
      shaping_->SetLinkRateHint(wire_rate_.Bps());
    }
  }
  wire_mark_ns_ = now;
  --unsent_;
}

void Sender::OnSendDone(size_t wire_bytes, int64_t latency_ns) {
  std::shared_ptr<SendItem> next;
  {
    absl::MutexLock lock(&mu_);
    wire_bytes_sum_ = wire_bytes_sum_ * kDecay + wire_bytes;
    // What the wire could carry with the whole window in flight (Little's
    // law over recent chunks): with the window full this is the measured
    // throughput; with the wire starved (encoders too slow to keep more
    // than a chunk or two in flight) the busy rate above only shows the
    // per-chunk latency, while this shows the room left.
    latency_sum_ = latency_sum_ * kDecay + std::max<int64_t>(latency_ns, 1);
    if (policy_ != nullptr) {
      policy_->OnWire(static_cast<double>(max_inflight_) * wire_bytes_sum_ /
                      (latency_sum_ * 1e-9));
    }
    if (shaping_ != nullptr || queue_.empty()) {
      --in_flight_;  // the shaped loop sends the next one
      return;
    }
    next = std::make_shared<SendItem>(std::move(queue_.front()));
    queue_.pop_front();
  }
  Send(std::move(next));
}

uint64_t Sender::probe_waits() const {
  absl::MutexLock lock(&mu_);
  return probe_waits_;
}

bool Sender::Ready() const {
  return stopping_ || (!queue_.empty() && in_flight_ < max_inflight_);
}

void Sender::ShapedLoop() {
  pthread_setname_np(pthread_self(), "stg-send");
  if (shaping_->LowPriority()) LowerBackgroundThread();
  for (;;) {
    SendItem item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Sender::Ready));
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const uint64_t wire_bytes = item.header.size() + item.payload.size();
    Status s = shaping_->Pace(item.raw_bytes);
    if (s.ok()) {
      // Before a predicted collective, let the bytes already sent leave
      // the NIC first: bytes queued ahead of the collective's would delay
      // it too. What is still queued is estimated from the link rate.
      for (;;) {
        uint64_t queued = 0;
        bool probing = false;
        {
          absl::MutexLock lock(&mu_);
          const int64_t now = NowNs();
          const double Bps = wire_rate_.Bps();
          if (wire_free_ns_ > now && Bps > 0) {
            queued = static_cast<uint64_t>((wire_free_ns_ - now) * 1e-9 * Bps);
          }
          // Until a first payload has left, the rate is unknown and nothing
          // would bound what is queued (a whole window of chunks could meet
          // the next collective): one chunk at a time measures it.
          probing = Bps <= 0 && unsent_ > 0;
          probe_waits_ += probing;
        }
        if (!probing &&
            (queued == 0 || shaping_->FitsWindow(queued + wire_bytes))) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (s.ok()) s = shaping_->Admit(wire_bytes);
    if (!s.ok()) {
      item.done(WithContext(s, item.what));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      const int64_t now = NowNs();
      ++in_flight_;
      const double Bps = wire_rate_.Bps();
      if (Bps > 0) {
        wire_free_ns_ = std::max(wire_free_ns_, now) +
                        static_cast<int64_t>(wire_bytes * 1e9 / Bps);
      }
    }
    Send(std::make_shared<SendItem>(std::move(item)));
  }
}

}  // namespace stagger::client
