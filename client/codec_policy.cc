#include "client/codec_policy.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace stagger::client {
namespace {

// Weight of a new sample in the moving averages: about the last ten
// chunks dominate, so a change of link or data shows within a save.
constexpr double kAlpha = 0.1;

// Moving average; the first sample (old value 0) is taken as it is.
double Blend(double old_value, double sample, bool first) {
  return first ? sample : old_value + kAlpha * (sample - old_value);
}

// Zero bytes in an 8-byte word: the high bit of each zero byte set.
inline int ZeroBytes(uint64_t x) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
  const uint64_t t = ~(((x & kLow7) + kLow7) | x | kLow7);
  return __builtin_popcountll(t);
}

// Zero bytes of a ^ b over [off, off + len).
uint64_t CountXorZeros(const char* a, const char* b, size_t off, size_t len) {
  uint64_t zeros = 0;
  size_t i = off;
  for (; i + 8 <= off + len; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    zeros += ZeroBytes(x ^ y);
  }
  for (; i < off + len; ++i) zeros += a[i] == b[i];
  return zeros;
}

}  // namespace

const char* CodecReasonName(CodecReason r) {
  switch (r) {
    case CodecReason::kDeadline:
      return "deadline";
    case CodecReason::kTraining:
      return "training";
    case CodecReason::kSparseDelta:
      return "sparse_delta";
    case CodecReason::kWireBound:
      return "wire_bound";
    case CodecReason::kEncoderBound:
      return "encoder_bound";
    case CodecReason::kNoGain:
      return "no_gain";
    case CodecReason::kFixed:
      return "fixed";
  }
  return "unknown";
}

double XorZeroFraction(const char* a, const char* b, size_t n) {
  if (n == 0) return 1;
  constexpr size_t kWhole = 64 << 10, kStride = 4096, kSample = 512;
  if (n < kWhole) return static_cast<double>(CountXorZeros(a, b, 0, n)) / n;
  uint64_t zeros = 0, seen = 0;
  for (size_t off = 0; off < n; off += kStride) {
    const size_t len = std::min(kSample, n - off);
    zeros += CountXorZeros(a, b, off, len);
    seen += len;
  }
  return static_cast<double>(zeros) / seen;
}

HostCpu HostCpu::Real() {
  HostCpu h;
  h.idle_core_seconds = [] {
    // "cpu  user nice system idle iowait ..." in USER_HZ ticks.
    std::FILE* f = std::fopen("/proc/stat", "re");
    if (f == nullptr) return -1.0;
    unsigned long long v[5] = {0, 0, 0, 0, 0};
    int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                        &v[3], &v[4]);
    std::fclose(f);
    if (n != 5) return -1.0;
    static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
    return static_cast<double>(v[3] + v[4]) / hz;
  };
  h.now_s = [] {
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  return h;
}

CodecPolicy::CodecPolicy(int encoder_threads, HostCpu cpu)
    : threads_(std::max(1, encoder_threads)), cpu_(std::move(cpu)) {}

double CodecPolicy::FractionLocked() const {
  double f = 1;
  if (encode_Bps_ > 0 && wire_Bps_ > 0) {
    double te = threads_ * encode_Bps_;
    f = te / (wire_Bps_ + te * (1 - ratio_));
  }
  return std::clamp(std::min(f, cap_), 0.0, 1.0);
}

void CodecPolicy::SampleCpuLocked() {
  if (!cpu_.idle_core_seconds || !cpu_.now_s) return;
  const double now = cpu_.now_s();
  if (last_idle_ >= 0 && now - last_now_ < kCpuSamplePeriod - 1e-9) return;
  const double idle = cpu_.idle_core_seconds();
  if (idle < 0) return;  // no /proc/stat: the model alone decides
  if (last_idle_ >= 0 && now > last_now_) {
    // The encoders' own CPU counts as idle when they run at idle
    // priority: the training job can take it back at any time.
    const double idle_cores =
        (idle + own_cpu_s_ - last_idle_) / (now - last_now_);
    if (idle_cores < kBusyIdleCores) {
      cap_ = std::max(kMinFraction, cap_ / kCapCut);
    } else if (idle_cores > kFreeIdleCores) {
      cap_ = std::min(1.0, cap_ + kCapStep);
    }
  }
  last_idle_ = idle + own_cpu_s_;
  last_now_ = now;
}

double CodecPolicy::cpu_cap() const {
  absl::MutexLock lock(&mu_);
  return cap_;
}

double CodecPolicy::encode_fraction() const {
  absl::MutexLock lock(&mu_);
  return FractionLocked();
}

CodecDecision CodecPolicy::Decide(const ChunkFacts& facts) {
  if (facts.paced) {
    double encoders_Bps;
    {
      absl::MutexLock lock(&mu_);
      encoders_Bps = threads_ * encode_Bps_;
    }
    // Unmeasured encoders are given the benefit of the doubt: the first
    // chunks measure them.
    if (encoders_Bps <= 0 || facts.pace_Bps <= 0 ||
        encoders_Bps >= facts.pace_Bps) {
      return {true, CodecReason::kDeadline};
    }
  }
  // Under a deadline the pacer already sets how fast bytes go: encoders
  // that cannot keep its pace would make the save late, so a paced save
  // encodes for the network's sake only as far as the model below finds
  // CPU for it.
  if (facts.training && !facts.paced) return {true, CodecReason::kTraining};
  if (facts.xor_zero_fraction >= kSparseZeroFraction) {
    return {true, CodecReason::kSparseDelta};
  }
  if (ShouldEncode()) return {true, CodecReason::kWireBound};
  return {false, CodecReason::kEncoderBound};
}

bool CodecPolicy::ShouldEncode() {
  absl::MutexLock lock(&mu_);
  SampleCpuLocked();
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

void CodecPolicy::OnIdleCpu(double cpu_seconds) {
  if (!(cpu_seconds > 0)) return;
  absl::MutexLock lock(&mu_);
  own_cpu_s_ += cpu_seconds;
}

void CodecPolicy::OnWire(double wire_Bps) {
  if (!(wire_Bps > 0) || !std::isfinite(wire_Bps)) return;
  absl::MutexLock lock(&mu_);
  wire_Bps_ = wire_Bps;
}

}  // namespace stagger::client
