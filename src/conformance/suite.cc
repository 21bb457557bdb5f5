// The suite's names for its tiers, and its table of checks as docs/conformance.md shows it.
#include "conformance/suite.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace rayaccel::conformance {

const char* TierName(int tier) {
  switch (tier) {
    case 1:
      return "discoverable";
    case 2:
      return "schedulable";
    case 3:
      return "transport";
    case 4:
      return "measured";
    case 5:
      return "certified in Ray";
    default:
      return "none";
  }
}

std::string ChecksMarkdown(const std::vector<Check>& checks) {
  // A | in a cell would end it.
  auto cell = [](const std::string& text) { return absl::StrReplaceAll(text, {{"|", "\\|"}}); };
  std::string out =
      "| check | tier | skip passes | what it proves | fix it leads with |\n"
      "|---|---|---|---|---|\n";
  for (const Check& c : checks) {
    absl::StrAppend(&out, "| `", c.name, "` | ", c.tier, " | ", c.skip_passes ? "yes" : "no", " | ",
                    cell(c.proves), " |",
                    c.fix.empty() ? "" : absl::StrCat(" \"", cell(c.fix), "\""), " |\n");
  }
  return out;
}

}  // namespace rayaccel::conformance
