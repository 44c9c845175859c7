// CodecPolicy: with codec "auto", decides chunk by chunk whether to encode
// (byte-grouped zstd, or an XOR delta) or to send the raw bytes. Its goal
// is bytes: on a cluster the NICs (shared with the training collectives)
// and the storage servers are the scarce resource. Decide() encodes a
// chunk, in this order of reasons (CodecReason):
//   deadline      the save has a QoS deadline and the encoders (threads x
//                 their measured speed) outrun the pace it sets: pacing
//                 leaves the cores idle between sends, so encoding costs
//                 no time (when they do not, the model below decides, so
//                 encoding cannot make the save miss its deadline);
//   training      the training job marks collectives and the save has
//                 no deadline: the network is shared with it, and every
//                 byte saved is the job's (with a deadline the pacer
//                 already keeps the save's bytes to the job's idle
//                 windows, and encoders that cannot keep its pace would
//                 only make the save late);
//   sparse_delta  the chunk's XOR against its previous version is at least
//                 kSparseZeroFraction zero bytes (XorZeroFraction, sampled):
//                 such a delta encodes fast and small;
// and otherwise as the throughput model below says: encoded ("wire_bound")
// when the wire, not encoding, limits how fast the save becomes durable,
// else raw ("encoder_bound") for the share that would slow the save.
// The caller sends an encoding raw anyway when it saves less than
// kMinGain ("no_gain").
//
// Model. With T encoder threads each encoding E raw bytes/s, encoded
// chunks r times their raw size, and a wire (link + server + disk) moving
// W bytes/s, encoding a fraction f of the chunks moves raw bytes at
//   X(f) = min(T*E / f, W / (1 - f*(1 - r)))
// (encoders limit the first term, the wire the second). X is largest at
//   f* = T*E / (W + T*E*(1 - r)), capped at 1,
// where X(f*) = W + T*E*(1 - r) >= W: never slower than all-raw, and every
// chunk is encoded whenever the wire, not encoding, is the bottleneck (a
// paced or slow link, a busy disk). f* > 0 always, so E and r keep being
// measured. Until the first measurements of both sides arrive, every chunk
// is encoded.
//
// E and r come from the chunks encoded (OnEncoded, exponential moving
// averages), W from the sender's measurement of the wire (OnWire). Chunks are
// assigned with a deterministic accumulator, so over any n chunks the encoded
// count is within one of n*f.
//
// The model assumes encoders run on CPU nobody else needs. When the wire's
// own path burns the host's CPU (TCP copies, checksums, a server on the
// same host) or the training job does, an encoder slows the wire it is
// meant to relieve, and W, measured while encoders run, falls and calls for
// more encoding. So the fraction is also capped by the host's idle CPU,
// sampled every kCpuSamplePeriod (the CPU that encoders running at idle
// priority used counts as idle, OnIdleCpu: the training job takes it back
// whenever it wants): below kBusyIdleCores idle cores the cap
// quarters (kCapCut: a save lasts seconds, so the cut must be quick), above
// kFreeIdleCores it grows by kCapStep, never below
// kMinFraction so that E and r keep being measured. The encoded fraction is
// min(f*, cap).
//
// Thread-safe.
#ifndef STAGGER_CLIENT_CODEC_POLICY_H_
#define STAGGER_CLIENT_CODEC_POLICY_H_

#include <cstdint>
#include <functional>

#include "absl/synchronization/mutex.h"

namespace stagger::client {

// Why a chunk went out encoded or raw; counted per save (SaveStats::
// codec_reasons) and shown by `stagger show`.
enum class CodecReason : int {
  kDeadline = 0,
  kTraining = 1,
  kSparseDelta = 2,
  kWireBound = 3,
  kEncoderBound = 4,  // raw
  kNoGain = 5,        // raw: the encoding saved too little
  kFixed = 6,         // codec option not "auto", or adaptive_codec off
};
inline constexpr int kCodecReasons = 7;
// "deadline", "training", "sparse_delta", "wire_bound", "encoder_bound",
// "no_gain", "fixed".
const char* CodecReasonName(CodecReason r);

// The fraction of zero bytes in a XOR b (n bytes each), from a sample: the
// first 512 bytes of every 4 KiB (every byte below 64 KiB). An estimate of
// how well an XOR delta compresses: zero bytes group into runs that zstd
// makes nearly free.
double XorZeroFraction(const char* a, const char* b, size_t n);

// What Decide() knows about one chunk.
struct ChunkFacts {
  bool paced = false;     // the save has a QoS deadline
  double pace_Bps = 0;    // raw bytes/s its pacer asks for (0: unknown)
  bool training = false;  // the job has marked collectives
  // XorZeroFraction against the previous version; < 0: no previous version.
  double xor_zero_fraction = -1;
};

struct CodecDecision {
  bool encode = true;
  CodecReason reason = CodecReason::kWireBound;
};

// The host's CPU as the policy sees it (injectable for tests).
struct HostCpu {
  // Idle core-seconds so far, all CPUs together (monotonic).
  std::function<double()> idle_core_seconds;
  std::function<double()> now_s;  // a monotonic clock, seconds
  // /proc/stat (idle + iowait) and the steady clock.
  static HostCpu Real();
};

class CodecPolicy {
 public:
  static constexpr double kCpuSamplePeriod = 0.05;  // seconds
  static constexpr double kBusyIdleCores = 0.2;
  static constexpr double kFreeIdleCores = 0.5;
  static constexpr double kCapStep = 0.125;
  static constexpr double kCapCut = 4;
  static constexpr double kMinFraction = 0.005;
  // A delta of at least this many zero bytes is always encoded.
  static constexpr double kSparseZeroFraction = 0.5;
  // An encoding that saves less than this share goes raw.
  static constexpr double kMinGain = 0.03;

  // `encoder_threads`: threads encoding in parallel (at least 1).
  explicit CodecPolicy(int encoder_threads, HostCpu cpu = HostCpu::Real());

  // Encode the next chunk, or send it raw, and why (see the top).
  CodecDecision Decide(const ChunkFacts& facts);
  // The throughput model alone: true: encode the next chunk; false: raw.
  bool ShouldEncode();
  // One chunk encoded: `raw` bytes in, `encoded` bytes out, taking
  // `seconds` on one thread.
  void OnEncoded(uint64_t raw, uint64_t encoded, double seconds);
  // `cpu_seconds` of CPU spent encoding on threads at idle priority
  // (SCHED_IDLE): idle time the encoders took, not the host being busy.
  void OnIdleCpu(double cpu_seconds);
  // What the wire can carry, bytes per second (measured by the sender:
  // the window over the chunks' recent latency).
  void OnWire(double wire_Bps);

  // min(f*, the CPU cap) (1 until measured).
  double encode_fraction() const;
  // The CPU cap alone.
  double cpu_cap() const;

 private:
  double FractionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a CPU sample when one is due and moves the cap.
  void SampleCpuLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int threads_;
  mutable absl::Mutex mu_;
  double encode_Bps_ ABSL_GUARDED_BY(mu_) = 0;  // per thread; 0: unknown
  double ratio_ ABSL_GUARDED_BY(mu_) = 1;       // encoded / raw
  double wire_Bps_ ABSL_GUARDED_BY(mu_) = 0;    // 0: unknown
  double credit_ ABSL_GUARDED_BY(mu_) = 0;
  const HostCpu cpu_;
  double cap_ ABSL_GUARDED_BY(mu_) = 1;
  double last_idle_ ABSL_GUARDED_BY(mu_) = -1;  // -1: no sample yet
  double last_now_ ABSL_GUARDED_BY(mu_) = 0;
  double own_cpu_s_ ABSL_GUARDED_BY(mu_) = 0;  // OnIdleCpu's sum
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CODEC_POLICY_H_
