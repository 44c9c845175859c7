#include "client/wire_rate.h"

#include <algorithm>
#include <cmath>

namespace stagger::client {

WireRate::WireRate(double time_constant_s)
    : time_constant_ns_(std::max(time_constant_s, 1e-3) * 1e9) {}

void WireRate::Add(int64_t now_ns, uint64_t bytes, int64_t busy_ns) {
  if (any_) {
    const double age =
        static_cast<double>(std::max<int64_t>(now_ns - last_ns_, 0));
    const double w = std::exp(-age / time_constant_ns_);
    bytes_ *= w;
    busy_ns_ *= w;
  }
  any_ = true;
  last_ns_ = std::max(last_ns_, now_ns);
  bytes_ += static_cast<double>(bytes);
  busy_ns_ += static_cast<double>(std::max<int64_t>(busy_ns, 0));
}

double WireRate::Bps() const {
  return busy_ns_ > 0 ? bytes_ * 1e9 / busy_ns_ : 0;
}

}  // namespace stagger::client
