// CopyToStaging: the host snapshot's copy into a staging slab.
//
// glibc's memcpy streams past the cache (non-temporal stores) only above
// a threshold derived from the last-level cache, hundreds of MiB on large
// servers, so a chunk-sized copy reads every destination line before
// writing it (read for ownership). Nothing reads a staging slab soon after
// the copy (the chunk waits for the hash or the wire behind the others), so
// a chunk of at least kStreamCopyMin bytes is written with streaming stores
// when the CPU has AVX2. Smaller copies, and CPUs without AVX2, use memcpy.
//
// Thread-safety: a pure function. The copy is complete and visible to
// other threads once it returns (it ends with a store fence).
#ifndef STAGGER_CLIENT_STAGING_COPY_H_
#define STAGGER_CLIENT_STAGING_COPY_H_

#include <cstddef>

namespace stagger::client {

inline constexpr size_t kStreamCopyMin = 256 << 10;

void CopyToStaging(void* dst, const void* src, size_t len);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_STAGING_COPY_H_
