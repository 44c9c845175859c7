// cpp_client: a program outside the stagger tree that saves a tensor to
// running stagger-servers and loads it back, built against the installed
// SDK (find_package(stagger) or pkg-config).
//
//   cpp_client HOST:PORT[,HOST:PORT...] [JOB]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "stagger/checkpointer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT[,...] [JOB]\n", argv[0]);
    return 2;
  }
  stagger::CheckpointerOptions options;
  options.servers = argv[1];
  options.job = argc > 2 ? argv[2] : "cpp-client";
  auto ck = stagger::Checkpointer::Open(options);
  if (!ck.ok()) {
    std::fprintf(stderr, "open: %s\n", ck.status().ToString().c_str());
    return 1;
  }
  std::vector<float> weights(1 << 20);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.001f * i;
  stagger::Status s = (*ck)->Register(
      {"weights", "F32", {int64_t(weights.size())}, weights.data()});
  if (!s.ok()) {
    std::fprintf(stderr, "register: %s\n", s.ToString().c_str());
    return 1;
  }
  auto handle = (*ck)->Save(1);
  if (!handle.ok() || !handle->Wait().ok()) {
    std::fprintf(
        stderr, "save: %s\n",
        (handle.ok() ? handle->Wait() : handle.status()).ToString().c_str());
    return 1;
  }
  const std::vector<float> saved = weights;
  std::memset(weights.data(), 0, weights.size() * sizeof(float));
  auto step = (*ck)->Load(stagger::kLatestStep);
  if (!step.ok()) {
    std::fprintf(stderr, "load: %s\n", step.status().ToString().c_str());
    return 1;
  }
  if (weights != saved) {
    std::fprintf(stderr, "load: step %lld came back different\n",
                 static_cast<long long>(*step));
    return 1;
  }
  const stagger::SaveStats st = handle->stats();
  std::printf(
      "cpp_client: saved and loaded step %lld of job %s: %llu bytes, %llu "
      "chunks, durable in %.3f s\n",
      static_cast<long long>(*step), options.job.c_str(),
      static_cast<unsigned long long>(st.bytes_raw),
      static_cast<unsigned long long>(st.chunks), st.durable_s);
  return 0;
}
