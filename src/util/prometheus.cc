#include "util/prometheus.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rayaccel {
namespace {

// A label value as the text format wants it: backslash, quote and newline escaped.
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void PrometheusWriter::Family(const std::string& name, const char* type, const std::string& help) {
  absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusWriter::Sample(const std::string& name,
                              const std::map<std::string, std::string>& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&out_, first ? "" : ",", k, "=\"", LabelValue(v), "\"");
      first = false;
    }
    out_ += '}';
  }
  const bool whole = value == static_cast<double>(static_cast<int64_t>(value)) &&
                     value < 9007199254740992.0 && value > -9007199254740992.0;
  absl::StrAppend(
      &out_, " ",
      whole ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrFormat("%.9g", value), "\n");
}

}  // namespace rayaccel
