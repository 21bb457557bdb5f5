// The JSON reader: sim specs, the plugin host's requests and small replies. Beyond not
// crashing, every value of a document read must start where it says it does, and an error must
// point inside the text or just past it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace {

using rayaccel::json::Value;

void CheckPlaced(const Value& v, std::string_view text, const std::vector<size_t>& lines) {
  if (v.line() < 1 || static_cast<size_t>(v.line()) > lines.size() || v.column() < 1) abort();
  const size_t at = lines[v.line() - 1] + static_cast<size_t>(v.column()) - 1;
  if (at >= text.size()) abort();
  const char c = text[at];
  bool starts = false;
  switch (v.type()) {
    case Value::Type::kNull:
      starts = c == 'n';
      break;
    case Value::Type::kBool:
      starts = c == (v.bool_value() ? 't' : 'f');
      break;
    case Value::Type::kNumber:
      starts = c == '-' || (c >= '0' && c <= '9');
      break;
    case Value::Type::kString:
      starts = c == '"';
      break;
    case Value::Type::kArray:
      starts = c == '[';
      break;
    case Value::Type::kObject:
      starts = c == '{';
      break;
  }
  if (!starts) abort();
  for (const Value& item : v.array()) CheckPlaced(item, text, lines);
  for (const Value::Member& m : v.members()) CheckPlaced(m.second, text, lines);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<size_t> lines = {0};  // where each line starts
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') lines.push_back(i + 1);
  }
  rayaccel::json::ParseError error;
  std::optional<Value> v = rayaccel::json::Parse(text, &error);
  if (v) {
    CheckPlaced(*v, text, lines);
  } else if (error.line < 1 || static_cast<size_t>(error.line) > lines.size() || error.column < 1 ||
             lines[error.line - 1] + static_cast<size_t>(error.column) - 1 > text.size()) {
    abort();
  }
  return 0;
}
