// Options of a stagger::Checkpointer.
#ifndef STAGGER_OPTIONS_H_
#define STAGGER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace stagger {

struct CheckpointerOptions {
  // Where checkpoints live: "host:port[,host:port...]" (gRPC addresses of
  // stagger-server daemons), or "embedded:DIR" to run a server inside this
  // process, storing under DIR (shared by every Checkpointer of the process
  // that names the same DIR).
  std::string servers;
  std::string job;           // [A-Za-z0-9._-]{1,128}
  uint32_t rank = 0;         // this process's rank, < world_size
  uint32_t world_size = 1;   // ranks that must commit for a step to exist

  uint64_t chunk_size = 4ull << 20;  // bytes per chunk, 4 KiB .. 64 MiB
  std::string codec = "zstd";        // "zstd" or "raw"
  int zstd_level = 1;
  size_t max_inflight_chunks = 16;   // chunks sent and not yet acked
  double rpc_timeout_s = 60;         // per control-plane call
};

}  // namespace stagger

#endif  // STAGGER_OPTIONS_H_
