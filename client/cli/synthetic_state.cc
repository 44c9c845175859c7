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
      // Mixed precision: the bf16 tensor is the rounded copy of an fp32
      // master that Adam updates; master and moments are not saved here.
      bf16_master_.resize(n);
      bf16_m_.resize(n);
      bf16_v_.resize(n);
      for (size_t i = 0; i < n; ++i) {
        bf16_master_[i] = 0.02f * Normal();
        BF16(t)[i] = ToBf16(bf16_master_[i]);
        WarmMoments(&bf16_m_[i], &bf16_v_[i]);
      }
    } else if (t.name == "dense.fp32.exp_avg") {
      float* v = F32(tensors_[&t - tensors_.data() + 1]);
      for (size_t i = 0; i < n; ++i) WarmMoments(&F32(t)[i], &v[i]);
    } else if (t.name == "dense.fp32.exp_avg_sq") {
      // Filled with exp_avg.
    } else {
      for (size_t i = 0; i < n; ++i) F32(t)[i] = 0.02f * Normal();
    }
  }
}

void SyntheticState::WarmMoments(float* m, float* v) {
  // Gradient scales spread over about an order of magnitude across
  // elements; the moments are the steady state of their moving averages:
  // exp_avg_sq ~ scale^2, exp_avg ~ sqrt((1-b1)/(1+b1)) * scale * N(0,1).
  float scale = 1e-3f * std::exp(0.6f * Normal());
  *v = scale * scale;
  *m = 0.23f * scale * Normal();
}

void SyntheticState::Step() {
  ++step_;
  // Adam in mid-training (moments warm, no bias correction) at a typical
  // peak learning rate for large models.
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.999f;
  auto adam = [&](float* w, float* m, float* v, size_t i) {
    float g = std::sqrt(v[i]) * Normal();  // the element's gradient scale
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    w[i] -= lr * m[i] / (std::sqrt(v[i]) + 1e-8f);
  };
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
        adam(bf16_master_.data(), bf16_m_.data(), bf16_v_.data(), i);
        BF16(t)[i] = ToBf16(bf16_master_[i]);
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
    for (size_t i = 0; i < n; ++i) adam(F32(*w), F32(*m), F32(*v), i);
  }
}

uint64_t SyntheticState::total_bytes() const {
  uint64_t n = 0;
  for (const SyntheticTensor& t : tensors_) n += t.bytes.size();
  return n;
}

}  // namespace stagger::client
