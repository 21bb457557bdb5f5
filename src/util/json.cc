#include "util/json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <unordered_set>

#include "nlohmann/json.hpp"

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

namespace {

// What nlohmann's lexer has read: the iterator it reads through marks the last character it
// handed over, and whether it was asked for one past the end. Values and errors are placed from
// these marks, since the library's events carry no positions.
struct ReadMark {
  const char* last = nullptr;
  bool past_end = false;
};

class MarkingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  MarkingIterator(const char* at, ReadMark* mark) : at_(at), mark_(mark) {}
  const char& operator*() const {
    mark_->last = at_;
    return *at_;
  }
  MarkingIterator& operator++() {
    ++at_;
    return *this;
  }
  MarkingIterator operator++(int) {
    MarkingIterator before = *this;
    ++at_;
    return before;
  }
  // The lexer compares with the end before each read.
  bool operator==(const MarkingIterator& other) const {
    if (at_ != other.at_) return false;
    mark_->past_end = true;
    return true;
  }
  bool operator!=(const MarkingIterator& other) const { return !(*this == other); }

 private:
  const char* at_;
  ReadMark* mark_;
};

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Our message for one of nlohmann's, and where it points.
struct Problem {
  enum class Where {
    kToken,    // the start of the token after the last value (a bad literal, number or value)
    kStop,     // the character the lexer stopped on inside a string, or the end
    kBracket,  // the one-character token ('[', ',', ':', ...) just read
    kEnd,      // the end of the text
  };
  std::string message;
  Where where = Where::kToken;
};

Problem Describe(const nlohmann::detail::exception& ex, char token_start) {
  using Where = Problem::Where;
  if (ex.id == 406) return {"number out of range"};
  std::string_view what = ex.what();
  std::string_view context;
  if (size_t at = what.find("while parsing "); at != std::string_view::npos) {
    context = what.substr(at + 14);
    context = context.substr(0, context.find(" - "));
  }
  std::string_view body = what.substr(std::min(what.size(), what.find(" - ") + 3));
  if (size_t read = body.find("; last read: "); read != std::string_view::npos) {
    const std::string_view lexer = body.substr(0, read);
    auto has = [&](std::string_view s) { return lexer.find(s) != std::string_view::npos; };
    if (has("missing closing quote")) return {"unterminated string", Where::kStop};
    if (has("control character")) return {"control character in string", Where::kStop};
    if (has("surrogate")) return {"unpaired surrogate in \\u escape", Where::kStop};
    if (has("4 hex digits")) return {"invalid \\u escape", Where::kStop};
    if (has("after backslash")) return {"invalid escape in string", Where::kStop};
    if (has("UTF-8")) return {"invalid UTF-8 in string", Where::kStop};
    if (has("after '.'")) return {"invalid number: digits expected after '.'"};
    if (has("exponent")) return {"invalid number: digits expected in exponent"};
    if (has("invalid number")) return {"invalid number"};
    if (has("invalid literal") &&
        (token_start == 't' || token_start == 'f' || token_start == 'n')) {
      return {"invalid literal"};
    }
    return {"unexpected character"};
  }
  // "unexpected <token>[; expected <token>]": a one-character token is named in quotes.
  std::string_view unexpected = body.substr(std::min(body.size(), sizeof("unexpected")));
  unexpected = unexpected.substr(0, unexpected.find(';'));
  Where where = unexpected == "end of input"                           ? Where::kEnd
                : unexpected.size() == 3 && unexpected.front() == '\'' ? Where::kBracket
                                                                       : Where::kToken;
  if (context == "array") return {"expected ',' or ']' in array", where};
  if (context == "object") return {"expected ',' or '}' in object", where};
  if (context == "object key") return {"expected a member name in quotes", where};
  if (context == "object separator") return {"expected ':' after member name", where};
  if (where == Where::kEnd) return {"unexpected end of input", where};
  if (body.find("expected end of input") != std::string_view::npos) {
    return {"unexpected text after the document", where};
  }
  return {"unexpected character", where};
}

// A JSON number's length from `at` (nlohmann has checked its form).
size_t NumberLength(std::string_view text, size_t at) {
  size_t end = at;
  auto digits = [&] {
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  };
  if (end < text.size() && text[end] == '-') ++end;
  if (end < text.size() && text[end] == '0') {
    ++end;  // a leading zero stands alone: "01" is 0, then text after the document
  } else {
    digits();
  }
  if (end < text.size() && text[end] == '.') ++end, digits();
  if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
    ++end;
    if (end < text.size() && (text[end] == '+' || text[end] == '-')) ++end;
    digits();
  }
  return end - at;
}

}  // namespace

// Builds Values from nlohmann's SAX events, placing each where its first character is.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<Value> Run(ParseError* error) {
    MarkingIterator first(text_.data(), &mark_), last(text_.data() + text_.size(), &mark_);
    if (!nlohmann::json::sax_parse(first, last, this)) {
      if (error != nullptr) *error = error_;
      return std::nullopt;
    }
    return std::move(root_);
  }

  // nlohmann's SAX interface.
  bool null() { return Scalar(4, Value::Type::kNull, false); }
  bool boolean(bool value) { return Scalar(value ? 4 : 5, Value::Type::kBool, value); }
  bool number_integer(int64_t /*value*/) { return Number(); }
  bool number_unsigned(uint64_t /*value*/) { return Number(); }
  bool number_float(double /*value*/, const std::string& /*text*/) { return Number(); }
  bool string(std::string& value) {
    Value* v = Place(NextToken());
    if (v == nullptr) return false;
    v->type_ = Value::Type::kString;
    v->text_ = std::move(value);
    prev_end_ = Read();
    return true;
  }
  bool binary(nlohmann::json::binary_t& /*value*/) { return false; }  // not in JSON text
  bool start_object(size_t /*elements*/) { return Open(Value::Type::kObject); }
  bool key(std::string& name) {
    const size_t start = NextToken();
    prev_end_ = Read();
    if (!keys_.back().insert(name).second) {
      return Fail("duplicate member \"" + name + "\"", start);
    }
    key_ = std::move(name);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(size_t /*elements*/) { return Open(Value::Type::kArray); }
  bool end_array() { return Close(); }
  bool parse_error(size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& ex) {
    const size_t next = NextToken();
    const Problem problem = Describe(ex, next < text_.size() ? text_[next] : '\0');
    size_t at = next;
    switch (problem.where) {
      case Problem::Where::kToken:
        break;
      case Problem::Where::kStop:
        at = mark_.past_end ? text_.size() : Read() - 1;
        break;
      case Problem::Where::kBracket:
        at = Read() - 1;  // the lexer reads no further than a bracket, comma or colon
        break;
      case Problem::Where::kEnd:
        at = text_.size();
        break;
    }
    return Fail(problem.message, at);
  }

 private:
  static constexpr size_t kMaxDepth = 64;

  // Index just past the last character the lexer has read.
  size_t Read() const {
    return mark_.last == nullptr ? 0 : static_cast<size_t>(mark_.last - text_.data()) + 1;
  }

  // Where the token after the last one seen starts: past blanks, a ',' or ':', and blanks.
  size_t NextToken() const {
    size_t at = prev_end_;
    while (at < text_.size() && IsBlank(text_[at])) ++at;
    if (at < text_.size() && (text_[at] == ',' || text_[at] == ':')) {
      ++at;
      while (at < text_.size() && IsBlank(text_[at])) ++at;
    }
    return at;
  }

  bool Fail(std::string message, size_t at) {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, line_start = i + 1;
    }
    error_ = ParseError{std::move(message), line, static_cast<int>(at - line_start) + 1};
    return false;
  }

  // The 1-based line and column of `at`; values arrive in text order, so a cursor moves on.
  void Locate(size_t at, Value* v) {
    for (; cursor_ < at; ++cursor_) {
      if (text_[cursor_] == '\n') ++line_, line_start_ = cursor_ + 1;
    }
    v->line_ = line_;
    v->column_ = static_cast<int>(at - line_start_) + 1;
  }

  // The slot for a value starting at `at`: the document, the next item, or the member named
  // by the last key; nullptr past the nesting limit.
  Value* Place(size_t at) {
    if (stack_.size() > kMaxDepth) {
      Fail("nesting deeper than 64 levels", at);
      return nullptr;
    }
    Value* v = &root_;
    if (!stack_.empty()) {
      Value* parent = stack_.back();
      if (parent->type_ == Value::Type::kArray) {
        v = &parent->items_.emplace_back();
      } else {
        v = &parent->members_.emplace_back(std::move(key_), Value()).second;
      }
    }
    Locate(at, v);
    return v;
  }

  bool Scalar(size_t length, Value::Type type, bool value) {
    const size_t start = NextToken();
    Value* v = Place(start);
    if (v == nullptr) return false;
    v->type_ = type;
    v->bool_ = value;
    prev_end_ = start + length;
    return true;
  }

  bool Number() {
    const size_t start = NextToken();
    Value* v = Place(start);
    if (v == nullptr) return false;
    const size_t length = NumberLength(text_, start);
    v->type_ = Value::Type::kNumber;
    v->text_ = std::string(text_.substr(start, length));
    v->number_ = std::strtod(v->text_.c_str(), nullptr);
    prev_end_ = start + length;
    if (!std::isfinite(v->number_)) return Fail("number out of range", start);
    return true;
  }

  bool Open(Value::Type type) {
    const size_t start = NextToken();
    Value* v = Place(start);
    if (v == nullptr) return false;
    v->type_ = type;
    stack_.push_back(v);
    keys_.emplace_back();
    prev_end_ = start + 1;
    return true;
  }

  bool Close() {
    stack_.pop_back();
    keys_.pop_back();
    prev_end_ = Read();
    return true;
  }

  std::string_view text_;
  ReadMark mark_;
  size_t prev_end_ = 0;  // just past the last token an event was seen for
  Value root_;
  std::vector<Value*> stack_;  // open containers, outermost first
  // Member names of each open container (duplicate check in O(1): inputs may be hostile).
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;  // the name of the member whose value comes next
  size_t cursor_ = 0, line_start_ = 0;
  int line_ = 1;
  ParseError error_;
};

std::optional<Value> Parse(std::string_view text, ParseError* error) {
  return Parser(text).Run(error);
}

// Strings and numbers are written by nlohmann's serializer: escapes as RFC 8259 has them, a
// byte that is no UTF-8 replaced by U+FFFD (never an exception), doubles in their shortest
// exact form.
std::string Quote(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
    out_ += nlohmann::json(value).dump();
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
