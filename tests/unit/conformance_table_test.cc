// The conformance suite's table of checks: each check named once, in a tier, saying what it
// proves; and the Markdown table docs/conformance.md carries, one row per check.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "conformance/suite.h"
#include "gtest/gtest.h"

namespace rayaccel::conformance {
namespace {

constexpr char kHeader[] =
    "| check | tier | skip passes | what it proves | fix it leads with |\n"
    "|---|---|---|---|---|\n";

TEST(ConformanceTable, EveryCheckIsNamedOnceAndSaysWhatItProves) {
  std::set<std::string> names;
  for (const Check& check : AllChecks()) {
    EXPECT_TRUE(names.insert(check.name).second) << check.name << " is in the table twice";
    EXPECT_GE(check.tier, 1) << check.name;
    EXPECT_LE(check.tier, kTopTier) << check.name;
    EXPECT_TRUE(check.run) << check.name;
    EXPECT_FALSE(check.why.empty()) << check.name;
    EXPECT_FALSE(check.proves.empty()) << check.name << " does not say what it proves";
    // One row of the doc's table each: a line break would end it.
    EXPECT_EQ(check.proves.find('\n'), std::string::npos) << check.name;
    EXPECT_EQ(check.fix.find('\n'), std::string::npos) << check.name;
  }
}

TEST(ConformanceTable, TheMarkdownTableHasARowPerCheckInOrder) {
  const std::vector<Check>& checks = AllChecks();
  const std::string table = ChecksMarkdown(checks);
  ASSERT_EQ(table.rfind(kHeader, 0), 0u) << table;
  std::vector<std::string> rows =
      absl::StrSplit(table.substr(sizeof(kHeader) - 1), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), checks.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].rfind("| `" + checks[i].name + "` | " + std::to_string(checks[i].tier) +
                                (checks[i].skip_passes ? " | yes | " : " | no | "),
                            0),
              0u)
        << rows[i];
  }
}

TEST(ConformanceTable, ACellKeepsItsPipesAndAnEmptyFixIsAnEmptyCell) {
  const std::vector<Check> checks = {
      {"a.one", 1, "why", true, nullptr, "a | b", "do this"},
      {"b.two", 2, "why", false, nullptr, "proves", ""},
  };
  EXPECT_EQ(ChecksMarkdown(checks), std::string(kHeader) +
                                        "| `a.one` | 1 | yes | a \\| b | \"do this\" |\n"
                                        "| `b.two` | 2 | no | proves | |\n");
}

}  // namespace
}  // namespace rayaccel::conformance
