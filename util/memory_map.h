// Anonymous memory mappings for large, long-lived buffers (the client's
// staging pool, the server's pull buffers).
//
// Thread-safety: the functions are thread-safe; a mapping belongs to its
// caller.
#ifndef STAGGER_UTIL_MEMORY_MAP_H_
#define STAGGER_UTIL_MEMORY_MAP_H_

#include <cstddef>

namespace stagger::util {

inline constexpr size_t kHugePage = 2 << 20;

struct MapOptions {
  // Start on a huge-page boundary and advise MADV_HUGEPAGE (where
  // transparent huge pages are "madvise", as Debian sets them): a first
  // touch then faults 2 MiB instead of 4 KiB. Ignored below kHugePage.
  bool huge_pages = false;
  // Fault every page in now, writable (MADV_POPULATE_WRITE, or a write
  // per page where the kernel predates it), so that later writes take no
  // fault.
  bool populate = false;
  // MADV_DONTFORK: a child made by fork() (a data loader's workers) does
  // not inherit the mapping, nor share its pages copy-on-write.
  bool dont_fork = false;
};

// Faults in [p, p + len) by a write per page (one fault per huge page where
// it is on them). The bytes written are zeros: only for memory whose
// contents nobody needs.
void FaultIn(char* p, size_t len);

// A private anonymous read-write mapping of `len` bytes (> 0), or nullptr
// when it cannot be made (errno says why). Release with Unmap(p, len).
char* MapAnonymous(size_t len, const MapOptions& options);
void Unmap(char* p, size_t len);

}  // namespace stagger::util

#endif  // STAGGER_UTIL_MEMORY_MAP_H_
