#include "util/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_set>

namespace rayaccel::json {

const char* Value::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "boolean";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
  }
  return "?";
}

const Value* Value::Find(std::string_view key) const {
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

std::optional<int64_t> Value::as_int64() const {
  if (type_ != Type::kNumber) return std::nullopt;
  if (text_.find_first_of(".eE") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text_.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<uint64_t> Value::as_uint64() const {
  if (type_ != Type::kNumber || text_.empty() || text_[0] == '-') return std::nullopt;
  if (text_.find_first_of(".eE") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text_.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<uint64_t>(v);
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<Value> Run(ParseError* error) {
    Value value;
    SkipSpace();
    bool ok = ParseValue(&value, 0);
    if (ok) {
      SkipSpace();
      if (pos_ != text_.size()) ok = Fail("unexpected text after the document");
    }
    if (!ok) {
      if (error != nullptr) *error = error_;
      return std::nullopt;
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  bool Fail(const std::string& message) {
    error_ = ParseError{message, line_, column()};
    return false;
  }
  int column() const { return static_cast<int>(pos_ - line_start_) + 1; }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        line_start_ = ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool ParseValue(Value* out, int depth) {
    if (depth > kMaxDepth) return Fail("nesting deeper than 64 levels");
    out->line_ = line_;
    out->column_ = column();
    switch (Peek()) {
      case '{':
        return ParseObject(out, depth);
      case '[':
        return ParseArray(out, depth);
      case '"':
        out->type_ = Value::Type::kString;
        return ParseString(&out->text_);
      case 't':
        return ParseLiteral("true", out, Value::Type::kBool, true);
      case 'f':
        return ParseLiteral("false", out, Value::Type::kBool, false);
      case 'n':
        return ParseLiteral("null", out, Value::Type::kNull, false);
      case '\0':
        if (AtEnd()) return Fail("unexpected end of input");
        return Fail("unexpected character");
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return ParseNumber(out);
        return Fail("unexpected character");
    }
  }

  bool ParseLiteral(std::string_view word, Value* out, Value::Type type, bool value) {
    if (text_.substr(pos_, word.size()) != word) return Fail("invalid literal");
    pos_ += word.size();
    out->type_ = type;
    out->bool_ = value;
    return true;
  }

  bool ParseNumber(Value* out) {
    size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (!AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Fail("invalid number");
    }
    if (Peek() == '.') {
      ++pos_;
      if (digits() == 0) return Fail("invalid number: digits expected after '.'");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (digits() == 0) return Fail("invalid number: digits expected in exponent");
    }
    out->type_ = Value::Type::kNumber;
    out->text_ = std::string(text_.substr(start, pos_ - start));
    out->number_ = std::strtod(out->text_.c_str(), nullptr);
    if (!std::isfinite(out->number_)) return Fail("number out of range");
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Fail("invalid \\u escape");
      }
    }
    *out = v;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in string");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      char e = Peek();
      ++pos_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (text_.substr(pos_, 2) != "\\u") return Fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            if (!ParseHex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return Fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("unpaired surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail("invalid escape in string");
      }
    }
  }

  bool ParseArray(Value* out, int depth) {
    out->type_ = Value::Type::kArray;
    ++pos_;
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      Value item;
      SkipSpace();
      if (!ParseValue(&item, depth + 1)) return false;
      out->items_.push_back(std::move(item));
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() == ']') {
        ++pos_;
        return true;
      } else {
        return Fail("expected ',' or ']' in array");
      }
    }
  }

  bool ParseObject(Value* out, int depth) {
    out->type_ = Value::Type::kObject;
    ++pos_;
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    std::unordered_set<std::string> keys;  // duplicate check in O(1): inputs may be hostile
    while (true) {
      SkipSpace();
      if (Peek() != '"') return Fail("expected a member name in quotes");
      const size_t key_pos = pos_;
      std::string key;
      if (!ParseString(&key)) return false;
      if (!keys.insert(key).second) {
        pos_ = key_pos;  // point at the repeated name
        return Fail("duplicate member \"" + key + "\"");
      }
      SkipSpace();
      if (Peek() != ':') return Fail("expected ':' after member name");
      ++pos_;
      SkipSpace();
      Value value;
      if (!ParseValue(&value, depth + 1)) return false;
      out->members_.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() == '}') {
        ++pos_;
        return true;
      } else {
        return Fail("expected ',' or '}' in object");
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  ParseError error_;
};

std::optional<Value> Parse(std::string_view text, ParseError* error) {
  return Parser(text).Run(error);
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

void Writer::Newline() {
  out_.push_back('\n');
  out_.append(2 * has_items_.size(), ' ');
}

void Writer::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back()) out_.push_back(',');
    has_items_.back() = true;
    Newline();
  }
}

Writer& Writer::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  has_items_.push_back(false);
  return *this;
}

Writer& Writer::Close(char bracket) {
  bool had_items = has_items_.back();
  has_items_.pop_back();
  if (had_items) Newline();
  out_.push_back(bracket);
  return *this;
}

Writer& Writer::EndObject() { return Close('}'); }

Writer& Writer::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  has_items_.push_back(false);
  return *this;
}

Writer& Writer::EndArray() { return Close(']'); }

Writer& Writer::Key(std::string_view key) {
  BeforeValue();
  out_ += Quote(key);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

Writer& Writer::String(std::string_view value) {
  BeforeValue();
  out_ += Quote(value);
  return *this;
}

Writer& Writer::Int(int64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
  return *this;
}

Writer& Writer::Uint(uint64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
  return *this;
}

Writer& Writer::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
  } else if (value == std::floor(value) && std::fabs(value) < 9.0e15) {
    out_ += std::to_string(static_cast<int64_t>(value));
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", value);
    out_ += buf;
  }
  return *this;
}

Writer& Writer::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

Writer& Writer::Null() {
  BeforeValue();
  out_ += "null";
  return *this;
}

Writer& Writer::Raw(std::string_view json) {
  BeforeValue();
  out_.append(json);
  return *this;
}

std::string Writer::Finish() {
  out_.push_back('\n');
  return std::move(out_);
}

}  // namespace rayaccel::json
