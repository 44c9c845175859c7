#include "util/memory_map.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"

namespace stagger::util {
namespace {

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

constexpr size_t kLen = 16 << 20;

TEST(MemoryMapTest, EmptyIsRefused) { EXPECT_EQ(MapAnonymous(0, {}), nullptr); }

TEST(MemoryMapTest, HugePagesStartOnAHugePageBoundary) {
  MapOptions o;
  o.huge_pages = true;
  char* p = MapAnonymous(kLen + 4096, o);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u);
  memset(p, 7, kLen + 4096);  // all of it is ours
  EXPECT_EQ(p[kLen + 4095], 7);
  Unmap(p, kLen + 4096);
}

TEST(MemoryMapTest, PopulatedMemoryTakesNoFaultWhenWritten) {
  const long pages = static_cast<long>(kLen / 4096);
  MapOptions lazy;
  char* a = MapAnonymous(kLen, lazy);
  ASSERT_NE(a, nullptr);
  long before = MinorFaults();
  memset(a, 1, kLen);
  const long unpopulated = MinorFaults() - before;
  Unmap(a, kLen);

  MapOptions now;
  now.populate = true;
  char* b = MapAnonymous(kLen, now);
  ASSERT_NE(b, nullptr);
  before = MinorFaults();
  memset(b, 1, kLen);
  const long populated = MinorFaults() - before;
  Unmap(b, kLen);
  EXPECT_GE(unpopulated, pages / 2);  // a fault per page (or per few)
  EXPECT_LE(populated, 8);
}

TEST(MemoryMapTest, AForkedChildDoesNotInheritADontForkMapping) {
  MapOptions o;
  o.dont_fork = true;
  char* p = MapAnonymous(1 << 20, o);
  ASSERT_NE(p, nullptr);
  p[0] = 1;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit 0 when no mapping of the child covers p (read from its maps,
    // not by touching p: a sanitizer would catch the fault).
    FILE* maps = fopen("/proc/self/maps", "r");
    if (maps == nullptr) _exit(2);
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    unsigned long lo = 0, hi = 0;
    char line[512];
    while (fgets(line, sizeof line, maps) != nullptr) {
      if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) {
        _exit(1);
      }
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child has the mapping";
  EXPECT_EQ(p[0], 1);  // the parent keeps it
  Unmap(p, 1 << 20);
}

}  // namespace
}  // namespace stagger::util
