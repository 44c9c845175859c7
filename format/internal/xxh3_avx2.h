// XXH3-128 built for AVX2, for chunk_id.cc to pick when the CPU has it.
// Debian's libxxhash is built for the x86-64 baseline (SSE2); the hash is
// defined the same for every vector width, so these give the library's
// value at about twice its speed on bytes in cache.
#ifndef STAGGER_FORMAT_INTERNAL_XXH3_AVX2_H_
#define STAGGER_FORMAT_INTERNAL_XXH3_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace stagger::format::internal {

// Whether this build has the AVX2 functions and the CPU can run them.
bool Xxh3Avx2Usable();

// XXH3-128 of `data`: *hi and *lo as XXH128_hash_t's high64 and low64.
// Only when Xxh3Avx2Usable().
void Xxh3Avx2(const void* data, size_t len, uint64_t* hi, uint64_t* lo);

// The same, and the CRC32C of the same bytes in *crc32c, block by block
// (each block is checksummed while the hash has just read it into cache).
void Xxh3Avx2WithCrc32c(const void* data, size_t len, size_t block,
                        uint64_t* hi, uint64_t* lo, uint32_t* crc32c);

}  // namespace stagger::format::internal

#endif  // STAGGER_FORMAT_INTERNAL_XXH3_AVX2_H_
