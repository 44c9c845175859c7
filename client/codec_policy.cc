#include "client/codec_policy.h"

#include <algorithm>
#include <cmath>

namespace stagger::client {
namespace {

// Weight of a new sample in the moving averages: about the last ten
// chunks dominate, so a change of link or data shows within a save.
constexpr double kAlpha = 0.1;

// Moving average; the first sample (old value 0) is taken as it is.
double Blend(double old_value, double sample, bool first) {
  return first ? sample : old_value + kAlpha * (sample - old_value);
}

}  // namespace

CodecPolicy::CodecPolicy(int encoder_threads)
    : threads_(std::max(1, encoder_threads)) {}

double CodecPolicy::FractionLocked() const {
  if (encode_Bps_ <= 0 || wire_Bps_ <= 0) return 1;
  double te = threads_ * encode_Bps_;
  double f = te / (wire_Bps_ + te * (1 - ratio_));
  return std::clamp(f, 0.0, 1.0);
}

double CodecPolicy::encode_fraction() const {
  absl::MutexLock lock(&mu_);
  return FractionLocked();
}

bool CodecPolicy::ShouldEncode() {
  absl::MutexLock lock(&mu_);
  credit_ += FractionLocked();
  if (credit_ >= 1 - 1e-9) {
    credit_ -= 1;
    return true;
  }
  return false;
}

void CodecPolicy::OnEncoded(uint64_t raw, uint64_t encoded, double seconds) {
  if (raw == 0 || seconds <= 0) return;
  absl::MutexLock lock(&mu_);
  bool first = encode_Bps_ <= 0;
  encode_Bps_ = Blend(encode_Bps_, raw / seconds, first);
  double r = std::min(1.0, static_cast<double>(encoded) / raw);
  ratio_ = Blend(ratio_, r, first);
}

void CodecPolicy::OnWire(double wire_Bps) {
  if (!(wire_Bps > 0) || !std::isfinite(wire_Bps)) return;
  absl::MutexLock lock(&mu_);
  wire_Bps_ = wire_Bps;
}

}  // namespace stagger::client
