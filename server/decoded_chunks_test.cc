#include "server/decoded_chunks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace stagger::server {
namespace {

format::ChunkId Id(uint64_t n) { return format::ChunkId{n, n}; }

// A decode that fills `size` bytes with `fill` and counts its runs.
std::function<Result<transport::Buffer>()> Fill(DecodedChunks& c, size_t size,
                                                char fill,
                                                std::atomic<int>* runs) {
  return [&c, size, fill, runs]() -> Result<transport::Buffer> {
    ++*runs;
    transport::Buffer b = c.NewBuffer(size);
    std::memset(b.data(), fill, size);
    return b;
  };
}

// The two parts of a chunk two ranks ask for: decoded once, then dropped
// once every byte was served.
TEST(DecodedChunksTest, KeptUntilEveryByteWasServed) {
  DecodedChunks c(1 << 20);
  std::atomic<int> runs{0};
  auto a = c.Get("j", Id(1), 1000, 600, Fill(c, 1000, 'a', &runs));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->view(), std::string(1000, 'a'));
  EXPECT_EQ(c.stats().bytes, 1000u);
  auto b = c.Get("j", Id(1), 1000, 400, Fill(c, 1000, 'b', &runs));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().bytes, 0u);
  // Served whole: the next ask decodes again.
  auto again = c.Get("j", Id(1), 1000, 10, Fill(c, 1000, 'c', &runs));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->view(), std::string(1000, 'c'));
  EXPECT_EQ(runs.load(), 2);
  // Another job's chunk of the same id is another entry.
  ASSERT_TRUE(c.Get("k", Id(1), 1000, 10, Fill(c, 1000, 'd', &runs)).ok());
  EXPECT_EQ(runs.load(), 3);
}

TEST(DecodedChunksTest, LeastRecentlyUsedLeavesPastTheBound) {
  DecodedChunks c(3000);
  std::atomic<int> runs{0};
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(c.Get("j", Id(i), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  }
  // 1 used again: 2 is now the oldest, and goes when 4 comes.
  ASSERT_TRUE(c.Get("j", Id(1), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  ASSERT_TRUE(c.Get("j", Id(4), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  EXPECT_EQ(runs.load(), 4);
  EXPECT_EQ(c.stats().bytes, 3000u);
  ASSERT_TRUE(c.Get("j", Id(1), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  ASSERT_TRUE(c.Get("j", Id(3), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  EXPECT_EQ(runs.load(), 4);
  ASSERT_TRUE(c.Get("j", Id(2), 1000, 1, Fill(c, 1000, 'x', &runs)).ok());
  EXPECT_EQ(runs.load(), 5);
  // Larger than the bound: served, never kept.
  ASSERT_TRUE(c.Get("j", Id(9), 5000, 1, Fill(c, 5000, 'x', &runs)).ok());
  EXPECT_LE(c.stats().bytes, 3000u);
}

// Callers that ask while the chunk is being decoded wait for that decode;
// its error reaches each of them and is not kept.
TEST(DecodedChunksTest, OneDecodeForConcurrentCallersAndErrorsNotKept) {
  DecodedChunks c(1 << 20);
  std::atomic<int> runs{0};
  absl::Notification started, release;
  std::vector<Status> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      if (i > 0) started.WaitForNotification();
      got[i] = c.Get("j", Id(7), 100, 10, [&]() -> Result<transport::Buffer> {
                  ++runs;
                  started.Notify();
                  release.WaitForNotification();
                  return absl::DataLossError("chunk 7 is bad");
                }).status();
    });
  }
  started.WaitForNotification();
  // The three others are waiting (or about to) on the one decode.
  while (c.stats().hits < 3) std::this_thread::yield();
  release.Notify();
  for (auto& t : threads) t.join();
  EXPECT_EQ(runs.load(), 1);
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  EXPECT_EQ(c.stats().bytes, 0u);
  auto ok = c.Get("j", Id(7), 100, 10, Fill(c, 100, 'z', &runs));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(runs.load(), 2);
}

// A slice keeps its chunk's bytes alive after the cache dropped them.
TEST(DecodedChunksTest, SliceOutlivesTheEntry) {
  DecodedChunks c(1 << 20);
  std::atomic<int> runs{0};
  transport::Buffer part;
  {
    auto b =
        c.Get("j", Id(3), 300000, 300000, [&]() -> Result<transport::Buffer> {
          transport::Buffer x = c.NewBuffer(300000);
          for (size_t i = 0; i < x.size(); ++i)
            x.data()[i] = static_cast<char>(i);
          return x;
        });
    ASSERT_TRUE(b.ok());
    part = DecodedChunks::Slice(*b, 70000, 5);
  }
  EXPECT_EQ(c.stats().bytes, 0u);
  ASSERT_EQ(part.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(part.data()[i], static_cast<char>(70000 + i)) << i;
  }
}

}  // namespace
}  // namespace stagger::server
