#include "util/log.h"

#include <regex>

#include "gtest/gtest.h"
#include "util/json.h"

namespace stagger::log {
namespace {

TEST(LogTest, ParsesLevelsAndNamesTheAcceptedOnes) {
  EXPECT_EQ(*ParseLevel("debug"), Level::kDebug);
  EXPECT_EQ(*ParseLevel("info"), Level::kInfo);
  EXPECT_EQ(*ParseLevel("warn"), Level::kWarning);
  EXPECT_EQ(*ParseLevel("warning"), Level::kWarning);
  EXPECT_EQ(*ParseLevel("error"), Level::kError);
  auto bad = ParseLevel("loud");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'loud'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("debug, info, warning, error"),
            std::string::npos);
}

TEST(LogTest, OneLineWithTimeLevelAndComponent) {
  const std::string line =
      Format(Level::kWarning, "stagger-server", "disk slow\nsecond line");
  EXPECT_TRUE(std::regex_match(
      line, std::regex("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z W "
                       "stagger-server: disk slow\\\\nsecond line\n")))
      << line;
}

TEST(LogTest, LevelFilters) {
  SetLevel(Level::kWarning);
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kWarning));
  EXPECT_TRUE(Enabled(Level::kError));
  SetLevel(Level::kDebug);
  EXPECT_TRUE(Enabled(Level::kDebug));
  SetLevel(Level::kInfo);
}

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\u000ad\"");
}

}  // namespace
}  // namespace stagger::log
