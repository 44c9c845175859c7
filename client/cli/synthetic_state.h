// SyntheticState: training-like model state for the demo and benchmarks
// (docs/benchmarks.md "Realistic data"). Random bytes do not compress and zeros
// compress too well; this behaves like a model being trained:
//   dense.bf16        bf16 weights: the rounded copy of an fp32 master
//                     that Adam updates each step (mixed precision)
//   dense.fp32        fp32 weights with Adam moments exp_avg / exp_avg_sq
//   embedding         fp32 table; a few percent of rows change per step
//   frozen.base       fp32 weights that never change (fine-tuning base)
//   adapter           small fp32 adapter weights, updated each step
// Deterministic for a seed. Not thread-safe.
#ifndef STAGGER_CLIENT_CLI_SYNTHETIC_STATE_H_
#define STAGGER_CLIENT_CLI_SYNTHETIC_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace stagger::client {

struct SyntheticTensor {
  std::string name;
  std::string dtype;  // "BF16" or "F32"
  std::vector<int64_t> shape;
  std::string cls;  // tensor class: dense_bf16, dense_fp32_adam, ...
  std::vector<char> bytes;
};

class SyntheticState {
 public:
  // About `bytes` bytes of state in total, split across the classes above.
  SyntheticState(uint64_t bytes, uint64_t seed);

  // One optimizer step: updates the tensors the way training would.
  void Step();

  std::vector<SyntheticTensor>& tensors() { return tensors_; }
  uint64_t total_bytes() const;

 private:
  float Normal();
  // Adam moments of one element in mid-training.
  void WarmMoments(float* m, float* v);
  uint64_t Next();
  std::vector<SyntheticTensor> tensors_;
  uint64_t rng_;
  int64_t step_ = 0;
  int64_t embedding_dim_ = 256;
  // fp32 master weights and Adam moments behind dense.bf16.
  std::vector<float> bf16_master_, bf16_m_, bf16_v_;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_SYNTHETIC_STATE_H_
