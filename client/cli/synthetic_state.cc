#include "client/cli/synthetic_state.h"

#include <cmath>
#include <cstring>

namespace stagger::client {
namespace {

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float* F32(SyntheticTensor& t) {
  return reinterpret_cast<float*>(t.bytes.data());
}
uint16_t* BF16(SyntheticTensor& t) {
  return reinterpret_cast<uint16_t*>(t.bytes.data());
}
size_t Count(const SyntheticTensor& t) {
  return t.bytes.size() / (t.dtype == "BF16" ? 2 : 4);
}

SyntheticTensor Make(const std::string& name, const std::string& dtype,
                     int64_t rows, int64_t cols, const std::string& cls) {
  SyntheticTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {rows, cols};
  t.cls = cls;
  t.bytes.resize(static_cast<size_t>(rows * cols) * (dtype == "BF16" ? 2 : 4));
  return t;
}

}  // namespace

uint64_t SyntheticState::Next() {
  // splitmix64: fast and good enough for synthetic data.
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float SyntheticState::Normal() {
  // Sum of four uniforms: cheap, bell-shaped, mean 0, variance 1/3 * 4/4.
  float s = 0;
  for (int i = 0; i < 4; ++i) {
    s += static_cast<float>(Next() >> 40) * (1.0f / (1 << 24)) - 0.5f;
  }
  return s * 1.732f;
}

SyntheticState::SyntheticState(uint64_t bytes, uint64_t seed) : rng_(seed) {
  const int64_t cols = 256;
  auto rows_for = [&](double share, int elem) {
    int64_t r = static_cast<int64_t>(bytes * share / (cols * elem));
    return r < 1 ? 1 : r;
  };
  tensors_.push_back(
      Make("dense.bf16", "BF16", rows_for(0.30, 2), cols, "dense_bf16"));
  int64_t fr = rows_for(0.12, 4);
  tensors_.push_back(Make("dense.fp32", "F32", fr, cols, "dense_fp32_adam"));
  tensors_.push_back(
      Make("dense.fp32.exp_avg", "F32", fr, cols, "dense_fp32_adam"));
  tensors_.push_back(
      Make("dense.fp32.exp_avg_sq", "F32", fr, cols, "dense_fp32_adam"));
  tensors_.push_back(Make("embedding", "F32", rows_for(0.20, 4), embedding_dim_,
                          "embedding_sparse"));
  tensors_.push_back(
      Make("frozen.base", "F32", rows_for(0.12, 4), cols, "frozen_base"));
  tensors_.push_back(
      Make("adapter", "F32", rows_for(0.01, 4), cols, "adapter"));

  for (SyntheticTensor& t : tensors_) {
    size_t n = Count(t);
    if (t.dtype == "BF16") {
      for (size_t i = 0; i < n; ++i) BF16(t)[i] = ToBf16(0.02f * Normal());
    } else if (t.name == "dense.fp32.exp_avg") {
      for (size_t i = 0; i < n; ++i) F32(t)[i] = 1e-3f * Normal();
    } else if (t.name == "dense.fp32.exp_avg_sq") {
      for (size_t i = 0; i < n; ++i) {
        float g = 1e-3f * Normal();
        F32(t)[i] = g * g + 1e-8f;
      }
    } else {
      for (size_t i = 0; i < n; ++i) F32(t)[i] = 0.02f * Normal();
    }
  }
}

void SyntheticState::Step() {
  ++step_;
  const float lr = 1e-4f, b1 = 0.9f, b2 = 0.999f;
  SyntheticTensor* w = nullptr;
  SyntheticTensor* m = nullptr;
  SyntheticTensor* v = nullptr;
  for (SyntheticTensor& t : tensors_) {
    if (t.name == "dense.fp32") w = &t;
    if (t.name == "dense.fp32.exp_avg") m = &t;
    if (t.name == "dense.fp32.exp_avg_sq") v = &t;
  }
  for (SyntheticTensor& t : tensors_) {
    size_t n = Count(t);
    if (t.cls == "dense_bf16") {
      for (size_t i = 0; i < n; ++i) {
        float x = FromBf16(BF16(t)[i]);
        BF16(t)[i] = ToBf16(x - lr * 10 * Normal());
      }
    } else if (t.cls == "embedding_sparse") {
      int64_t rows = t.shape[0];
      int64_t changed = rows / 50 + 1;  // ~2% of rows per step
      for (int64_t k = 0; k < changed; ++k) {
        int64_t r = static_cast<int64_t>(Next() % rows);
        float* row = F32(t) + r * t.shape[1];
        for (int64_t c = 0; c < t.shape[1]; ++c) row[c] -= lr * Normal();
      }
    } else if (t.cls == "adapter") {
      for (size_t i = 0; i < n; ++i) F32(t)[i] -= lr * Normal();
    }
  }
  if (w && m && v) {
    size_t n = Count(*w);
    for (size_t i = 0; i < n; ++i) {
      float g = 1e-3f * Normal();
      float mi = b1 * F32(*m)[i] + (1 - b1) * g;
      float vi = b2 * F32(*v)[i] + (1 - b2) * g * g;
      F32(*m)[i] = mi;
      F32(*v)[i] = vi;
      F32(*w)[i] -= lr * mi / (std::sqrt(vi) + 1e-8f);
    }
  }
}

uint64_t SyntheticState::total_bytes() const {
  uint64_t n = 0;
  for (const SyntheticTensor& t : tensors_) n += t.bytes.size();
  return n;
}

}  // namespace stagger::client
