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

}  // namespace
}  // namespace stagger::client
