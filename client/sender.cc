#include "client/sender.h"

#include <chrono>

#include "format/data_plane.h"

namespace stagger::client {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Weight of a new completion in the wire throughput average.
constexpr double kAlpha = 0.2;

}  // namespace

Sender::Sender(size_t max_inflight, CodecPolicy* policy, Shaping* shaping)
    : max_inflight_(max_inflight == 0 ? 1 : max_inflight),
      policy_(policy),
      shaping_(shaping) {
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

double Sender::wire_Bps() const {
  absl::MutexLock lock(&mu_);
  return wire_Bps_;
}

void Sender::Enqueue(SendItem item) {
  {
    absl::MutexLock lock(&mu_);
    if (shaping_ != nullptr || in_flight_ >= max_inflight_) {
      queue_.push_back(std::move(item));
      return;
    }
    if (in_flight_++ == 0) wire_mark_ns_ = NowNs();
    in_flight_bytes_ += item.header.size() + item.payload.size();
  }
  Send(std::make_shared<SendItem>(std::move(item)));
}

void Sender::Send(std::shared_ptr<SendItem> p) {
  const size_t wire_bytes = p->header.size() + p->payload.size();
  p->server->data->Call(
      static_cast<uint16_t>(format::DataOp::kPutChunk), p->header, p->payload,
      [this, p, wire_bytes](Result<transport::Message> reply) {
        Status s = reply.status();
        if (s.ok()) {
          auto r = format::DecodeReply(reply->header);
          s = r.ok() ? r->status : r.status();
        }
        p->done(WithContext(s, p->what));
        OnSendDone(wire_bytes);
      });
}

void Sender::OnSendDone(size_t wire_bytes) {
  std::shared_ptr<SendItem> next;
  {
    absl::MutexLock lock(&mu_);
    // The wire was busy from the mark to now and completed these bytes.
    const int64_t now = NowNs();
    const double busy_s = (now - wire_mark_ns_) * 1e-9;
    wire_mark_ns_ = now;
    if (busy_s > 0) {
      const double sample = wire_bytes / busy_s;
      wire_Bps_ =
          wire_Bps_ == 0 ? sample : wire_Bps_ + kAlpha * (sample - wire_Bps_);
      if (policy_ != nullptr) policy_->OnWire(wire_bytes, busy_s);
      if (shaping_ != nullptr) shaping_->SetLinkRateHint(wire_Bps_);
    }
    in_flight_bytes_ -= wire_bytes;
    if (shaping_ != nullptr || queue_.empty()) {
      --in_flight_;  // the shaped loop sends the next one
      return;
    }
    next = std::make_shared<SendItem>(std::move(queue_.front()));
    queue_.pop_front();
    in_flight_bytes_ += next->header.size() + next->payload.size();
  }
  Send(std::move(next));
}

bool Sender::Ready() const {
  return stopping_ || (!queue_.empty() && in_flight_ < max_inflight_);
}

void Sender::ShapedLoop() {
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
      // Before a predicted collective, let what is in flight drain first:
      // bytes queued ahead of this chunk would delay the collective too.
      absl::MutexLock lock(&mu_);
      while (in_flight_ > 0 &&
             !shaping_->FitsWindow(in_flight_bytes_ + wire_bytes)) {
        // Re-checked on each completion, and every millisecond (the
        // window moves with time).
        std::pair<Sender*, size_t> arg(this, in_flight_);
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](std::pair<Sender*, size_t>* a) {
                                   a->first->mu_.AssertHeld();
                                   return a->first->in_flight_ != a->second;
                                 },
                                 &arg),
                             absl::Milliseconds(1));
      }
    }
    if (s.ok()) s = shaping_->Admit(wire_bytes);
    if (!s.ok()) {
      item.done(WithContext(s, item.what));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (in_flight_++ == 0) wire_mark_ns_ = NowNs();
      in_flight_bytes_ += wire_bytes;
    }
    Send(std::make_shared<SendItem>(std::move(item)));
  }
}

}  // namespace stagger::client
