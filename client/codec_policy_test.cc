#include "client/codec_policy.h"

#include <gtest/gtest.h>

#include <string>

namespace stagger::client {
namespace {

// A host whose clock never moves: one CPU sample, the cap stays 1, and the
// model alone decides.
HostCpu Frozen() {
  return HostCpu{[] { return 0.0; }, [] { return 0.0; }};
}

// A host driven by the test.
struct FakeCpu {
  double idle = 0, now = 0;
  HostCpu Host() {
    return HostCpu{[this] { return idle; }, [this] { return now; }};
  }
  // `seconds` pass with `idle_cores` idle.
  void Pass(double seconds, double idle_cores) {
    now += seconds;
    idle += seconds * idle_cores;
  }
};

int EncodedOf(CodecPolicy& p, int n) {
  int k = 0;
  for (int i = 0; i < n; ++i) k += p.ShouldEncode() ? 1 : 0;
  return k;
}

TEST(CodecPolicy, EncodesEverythingUntilBothSidesAreMeasured) {
  CodecPolicy p(2, Frozen());
  EXPECT_EQ(EncodedOf(p, 10), 10);
  p.OnEncoded(4 << 20, 1 << 20, 0.04);  // 100 MB/s per thread
  EXPECT_EQ(p.encode_fraction(), 1.0);
  EXPECT_EQ(EncodedOf(p, 10), 10);
}

TEST(CodecPolicy, EncodesEverythingWhenTheWireIsTheBottleneck) {
  CodecPolicy p(2, Frozen());
  // Encoders: 2 x 400 MB/s, ratio 0.25; wire 100 MB/s: even fully
  // encoded the wire limits (it carries 400 MB/s of raw bytes at r=0.25).
  p.OnEncoded(400'000'000, 100'000'000, 1.0);
  p.OnWire(100'000'000);
  EXPECT_EQ(p.encode_fraction(), 1.0);
  EXPECT_EQ(EncodedOf(p, 100), 100);
}

TEST(CodecPolicy, MixesWhenEncodingIsTheBottleneck) {
  CodecPolicy p(2, Frozen());
  // T*E = 2 x 250 MB/s = 500 MB/s, r = 0.5, W = 1000 MB/s:
  // f* = 500 / (1000 + 500 * 0.5) = 0.4, X = 1000 + 250 = 1250 MB/s.
  p.OnEncoded(250'000'000, 125'000'000, 1.0);
  p.OnWire(1'000'000'000);
  EXPECT_NEAR(p.encode_fraction(), 0.4, 1e-9);
  EXPECT_EQ(EncodedOf(p, 100), 40);
  EXPECT_EQ(EncodedOf(p, 5), 2);
}

TEST(CodecPolicy, IncompressibleDataOnAFastWireStillKeepsSampling) {
  CodecPolicy p(1, Frozen());
  // r = 1 (nothing gained), T*E = 100 MB/s, W = 1000 MB/s: f* = 0.1.
  p.OnEncoded(100'000'000, 100'000'000, 1.0);
  p.OnWire(1'000'000'000);
  EXPECT_NEAR(p.encode_fraction(), 0.1, 1e-9);
  EXPECT_EQ(EncodedOf(p, 50), 5);
}

TEST(CodecPolicy, FollowsAChangeOfTheWire) {
  CodecPolicy p(1, Frozen());
  p.OnEncoded(200'000'000, 100'000'000, 1.0);
  p.OnWire(2'000'000'000);  // fast: f* = 200 / (2000 + 100) < 0.1
  EXPECT_LT(p.encode_fraction(), 0.1);
  // The link slows to 50 MB/s (e.g. paced): everything is encoded again.
  p.OnWire(50'000'000);
  EXPECT_EQ(p.encode_fraction(), 1.0);
}

TEST(CodecPolicy, IgnoresEmptySamples) {
  CodecPolicy p(1, Frozen());
  p.OnEncoded(0, 0, 1.0);
  p.OnEncoded(100, 50, 0);
  p.OnWire(0);
  p.OnWire(-1);
  EXPECT_EQ(p.encode_fraction(), 1.0);
}

TEST(CodecPolicy, BusyHostCutsTheCapIdleHostGrowsIt) {
  FakeCpu cpu;
  CodecPolicy p(1, cpu.Host());
  EXPECT_TRUE(p.ShouldEncode());  // first sample: nothing measured yet
  EXPECT_EQ(p.cpu_cap(), 1.0);
  // 0.1 idle cores (< 0.2): a quarter per sample period, down to the floor.
  const double expected[] = {0.25, 0.0625, 0.015625, 0.005, 0.005};
  for (double e : expected) {
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.1);
    p.ShouldEncode();
    EXPECT_DOUBLE_EQ(p.cpu_cap(), e);
  }
  // Between the thresholds (0.3 idle cores): the cap holds.
  cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.3);
  p.ShouldEncode();
  EXPECT_DOUBLE_EQ(p.cpu_cap(), 0.005);
  // Samples come at most once per period.
  cpu.Pass(CodecPolicy::kCpuSamplePeriod / 4, 2.0);
  p.ShouldEncode();
  EXPECT_DOUBLE_EQ(p.cpu_cap(), 0.005);
  // A core and more idle: + kCapStep per period, up to 1.
  cpu.Pass(CodecPolicy::kCpuSamplePeriod, 1.5);
  p.ShouldEncode();
  EXPECT_DOUBLE_EQ(p.cpu_cap(), 0.005 + CodecPolicy::kCapStep);
  for (int i = 0; i < 10; ++i) {
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 1.5);
    p.ShouldEncode();
  }
  EXPECT_EQ(p.cpu_cap(), 1.0);
}

TEST(CodecPolicy, EncodesTheSmallerOfModelAndCpuCap) {
  FakeCpu cpu;
  CodecPolicy p(2, cpu.Host());
  // The model says 0.4 (as in MixesWhenEncodingIsTheBottleneck).
  p.OnEncoded(250'000'000, 125'000'000, 1.0);
  p.OnWire(1'000'000'000);
  p.ShouldEncode();
  EXPECT_NEAR(p.encode_fraction(), 0.4, 1e-9);
  // A saturated host: one cut brings the cap to 0.25, below the model.
  for (int i = 0; i < 1; ++i) {
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.0);
    p.ShouldEncode();
  }
  EXPECT_DOUBLE_EQ(p.encode_fraction(), 0.25);
  EXPECT_EQ(EncodedOf(p, 100), 25);
  // With idle CPU again the cap climbs past the model, which then rules.
  for (int i = 0; i < 8; ++i) {
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 1.0);
    p.ShouldEncode();
  }
  EXPECT_NEAR(p.encode_fraction(), 0.4, 1e-9);
}

TEST(CodecPolicy, WithoutCpuFiguresTheModelAloneDecides) {
  FakeCpu cpu;
  HostCpu blind = cpu.Host();
  blind.idle_core_seconds = [] { return -1.0; };  // no /proc/stat
  CodecPolicy p(1, blind);
  for (int i = 0; i < 5; ++i) {
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.0);
    p.ShouldEncode();
  }
  EXPECT_EQ(p.cpu_cap(), 1.0);
}

TEST(CodecPolicy, RealHostCpuReadsProcStat) {
  HostCpu h = HostCpu::Real();
  const double a = h.idle_core_seconds();
  ASSERT_GT(a, 0) << "no readable /proc/stat";
  EXPECT_GE(h.idle_core_seconds(), a);
  EXPECT_GT(h.now_s(), 0);
}

// An encoder-bound policy: T*E = 100 MB/s, r = 0.5, W = 1000 MB/s:
// f* = 100 / (1000 + 50) ~ 0.095, so the model alone sends most chunks raw.
void MakeEncoderBound(CodecPolicy& p) {
  p.OnEncoded(100'000'000, 50'000'000, 1.0);
  p.OnWire(1'000'000'000);
}

int Reasons(CodecPolicy& p, const ChunkFacts& f, int n, CodecReason reason,
            bool encode) {
  int k = 0;
  for (int i = 0; i < n; ++i) {
    CodecDecision d = p.Decide(f);
    k += d.reason == reason && d.encode == encode;
  }
  return k;
}

TEST(CodecPolicy, ADeadlineOrMarkedTrainingEncodesEveryChunk) {
  CodecPolicy p(1, Frozen());
  MakeEncoderBound(p);
  ASSERT_LT(p.encode_fraction(), 0.1);
  ChunkFacts paced;
  paced.paced = true;
  EXPECT_EQ(Reasons(p, paced, 50, CodecReason::kDeadline, true), 50);
  ChunkFacts training;
  training.training = true;
  training.xor_zero_fraction = 0.1;
  EXPECT_EQ(Reasons(p, training, 50, CodecReason::kTraining, true), 50);
}

TEST(CodecPolicy, ADeadlineFasterThanTheEncodersLeavesItToTheModel) {
  CodecPolicy p(1, Frozen());
  MakeEncoderBound(p);  // encoders: 100 MB/s
  ChunkFacts slow_pace;
  slow_pace.paced = true;
  slow_pace.pace_Bps = 50'000'000;  // the encoders keep up
  EXPECT_EQ(Reasons(p, slow_pace, 20, CodecReason::kDeadline, true), 20);
  ChunkFacts fast_pace = slow_pace;
  fast_pace.pace_Bps = 400'000'000;  // they would fall behind
  int model = 0;
  for (int i = 0; i < 100; ++i) {
    CodecReason r = p.Decide(fast_pace).reason;
    model += r == CodecReason::kWireBound || r == CodecReason::kEncoderBound;
  }
  EXPECT_EQ(model, 100);
  // A sparse delta still goes encoded: it is cheap.
  fast_pace.xor_zero_fraction = 0.9;
  EXPECT_EQ(Reasons(p, fast_pace, 10, CodecReason::kSparseDelta, true), 10);
}

TEST(CodecPolicy, ASparseDeltaIsEncodedEvenWhenEncodingIsTheBottleneck) {
  CodecPolicy p(1, Frozen());
  MakeEncoderBound(p);
  ChunkFacts sparse;
  sparse.xor_zero_fraction = 0.98;  // 2% of the bytes changed
  EXPECT_EQ(Reasons(p, sparse, 50, CodecReason::kSparseDelta, true), 50);
  ChunkFacts half;
  half.xor_zero_fraction = CodecPolicy::kSparseZeroFraction;
  EXPECT_EQ(Reasons(p, half, 10, CodecReason::kSparseDelta, true), 10);
}

TEST(CodecPolicy, ADenseDeltaOrNoBaseFollowsTheModel) {
  CodecPolicy p(1, Frozen());
  MakeEncoderBound(p);
  ChunkFacts dense;
  dense.xor_zero_fraction = 0.2;
  int encoded = 0, raw = 0;
  for (int i = 0; i < 100; ++i) {
    CodecDecision d = p.Decide(dense);
    if (d.encode) {
      EXPECT_EQ(d.reason, CodecReason::kWireBound);
      ++encoded;
    } else {
      EXPECT_EQ(d.reason, CodecReason::kEncoderBound);
      ++raw;
    }
  }
  EXPECT_EQ(encoded, 9);  // floor(100 * 0.0952)
  EXPECT_EQ(raw, 91);
  // When the wire is the bottleneck, every chunk is encoded.
  CodecPolicy slow_wire(1, Frozen());
  slow_wire.OnEncoded(100'000'000, 50'000'000, 1.0);
  slow_wire.OnWire(10'000'000);
  EXPECT_EQ(Reasons(slow_wire, ChunkFacts{}, 20, CodecReason::kWireBound, true),
            20);
}

TEST(CodecPolicy, ReasonsHaveNames) {
  EXPECT_STREQ(CodecReasonName(CodecReason::kDeadline), "deadline");
  EXPECT_STREQ(CodecReasonName(CodecReason::kSparseDelta), "sparse_delta");
  EXPECT_STREQ(CodecReasonName(CodecReason::kEncoderBound), "encoder_bound");
  EXPECT_STREQ(CodecReasonName(CodecReason::kNoGain), "no_gain");
}

TEST(XorZeroFraction, CountsEqualBytesExactlyBelow64KiBAndBySampleAbove) {
  std::string a(1000, 'a'), b = a;
  for (size_t i = 0; i < b.size(); i += 4) b[i] = 'b';  // 250 differ
  EXPECT_DOUBLE_EQ(XorZeroFraction(a.data(), b.data(), a.size()), 0.75);
  EXPECT_DOUBLE_EQ(XorZeroFraction(a.data(), a.data(), a.size()), 1.0);
  EXPECT_DOUBLE_EQ(XorZeroFraction(a.data(), b.data(), 3), 2.0 / 3);
  // 4 MiB, every 10th byte changed: the sample sees about the same share.
  std::string big(4 << 20, '\0'), other = big;
  for (size_t i = 0; i < other.size(); i += 10) other[i] = 1;
  EXPECT_NEAR(XorZeroFraction(big.data(), other.data(), big.size()), 0.9, 0.01);
  // Changes only outside the sampled 512 of every 4 KiB are not seen: the
  // figure is an estimate.
  std::string unsampled = big;
  for (size_t i = 1024; i < unsampled.size(); i += 4096) unsampled[i] = 1;
  EXPECT_DOUBLE_EQ(XorZeroFraction(big.data(), unsampled.data(), big.size()),
                   1.0);
}

}  // namespace
TEST(CodecPolicy, IdlePriorityEncodersDoNotMakeTheHostLookBusy) {
  FakeCpu cpu;
  CodecPolicy p(1, cpu.Host());
  p.ShouldEncode();  // first sample
  // The host shows 0.1 idle cores, but the encoders (SCHED_IDLE) used 0.8
  // cores of what was idle: 0.9 cores were free for them.
  for (int i = 0; i < 3; ++i) {
    p.OnIdleCpu(0.8 * CodecPolicy::kCpuSamplePeriod);
    cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.1);
    p.ShouldEncode();
    EXPECT_EQ(p.cpu_cap(), 1.0);
  }
  // Without that count the same host is busy and the cap falls.
  cpu.Pass(CodecPolicy::kCpuSamplePeriod, 0.1);
  p.ShouldEncode();
  EXPECT_DOUBLE_EQ(p.cpu_cap(), 0.25);
}

TEST(CodecPolicy,
     MarkedTrainingUnderADeadlineEncodesOnlyWhatTheEncodersKeepUp) {
  CodecPolicy p(1, Frozen());
  MakeEncoderBound(p);  // encoders: 100 MB/s
  ChunkFacts facts;
  facts.training = true;
  facts.paced = true;
  facts.pace_Bps = 50'000'000;  // they keep up: encoded for the deadline
  EXPECT_EQ(Reasons(p, facts, 10, CodecReason::kDeadline, true), 10);
  // Falling behind (CPU taken by the training job), they no longer encode
  // for the training's network: the pacer already keeps the save in its
  // idle windows, and encoding would make it late.
  facts.pace_Bps = 400'000'000;
  int training = 0, raw = 0;
  for (int i = 0; i < 100; ++i) {
    CodecDecision d = p.Decide(facts);
    training += d.reason == CodecReason::kTraining;
    raw += !d.encode;
  }
  EXPECT_EQ(training, 0);
  EXPECT_GT(raw, 0);
  // Without a deadline the network is still worth the encoding.
  facts.paced = false;
  EXPECT_EQ(Reasons(p, facts, 10, CodecReason::kTraining, true), 10);
}

}  // namespace stagger::client
