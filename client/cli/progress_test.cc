#include "client/cli/progress.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace stagger::client {
namespace {

std::string Read(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(ProgressTest, PlainLinesOffATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("restore", 4ull << 30, true, f, /*terminal=*/0);
    EXPECT_EQ(p.Line(1ull << 30, 2.0),
              "restore: 1.00 GiB / 4.00 GiB (25%), 537 MB/s, ETA 6 s");
    EXPECT_EQ(p.Line(0, 0.0), "restore: 0 B / 4.00 GiB (0%), 0 MB/s, ETA -");
    p.Add(4ull << 30);
  }  // the destructor finishes: one final line, newline-terminated
  const std::string out = Read(f);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out.find("restore: 4.00 GiB / 4.00 GiB (100%)"), std::string::npos)
      << out;
  std::fclose(f);
}

TEST(ProgressTest, BarOnATerminalCountsItems) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p("gc", 4, /*bytes=*/false, f, /*terminal=*/1);
  EXPECT_EQ(p.Line(1, 1.0),
            "gc       [######..................]  25%  1 / 4  1.0/s  ETA 3s");
  p.Add(4);
  p.Finish();
  p.Finish();  // once only
  const std::string out = Read(f);
  EXPECT_EQ(out.front(), '\r');
  EXPECT_NE(out.find("[########################] 100%  4 / 4"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.back(), '\n');
  std::fclose(f);
}

TEST(ProgressTest, SayClearsTheBarBeforeItsLine) {
  std::FILE* bar = std::tmpfile();
  std::FILE* results = std::tmpfile();
  ASSERT_NE(bar, nullptr);
  ASSERT_NE(results, nullptr);
  {
    Progress p("restore", 10, /*bytes=*/false, bar, /*terminal=*/1);
    p.Say(results, "wrote out/rank-00000.safetensors");
  }
  EXPECT_EQ(Read(results), "wrote out/rank-00000.safetensors\n");
  // The bar's line is cleared before the result is printed; the bar never
  // shares a line with it.
  const std::string out = Read(bar);
  EXPECT_EQ(out.rfind("\r\033[K", 0), 0u) << out;
  std::fclose(bar);
  std::fclose(results);
  // Off a terminal nothing is cleared.
  std::FILE* log = std::tmpfile();
  std::FILE* res = std::tmpfile();
  {
    Progress p("restore", 10, false, log, /*terminal=*/0);
    p.Say(res, "wrote x");
  }
  EXPECT_EQ(Read(log).find('\r'), std::string::npos);
  EXPECT_EQ(Read(res), "wrote x\n");
  std::fclose(log);
  std::fclose(res);
}

}  // namespace
}  // namespace stagger::client
