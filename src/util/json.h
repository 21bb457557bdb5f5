// JSON in and out, on nlohmann-json (header-only: plugins link it without Abseil or Protobuf).
//
// nlohmann's events carry no positions, and the sim plugin must report "file:line: field:
// problem" for a malformed spec, so Parse builds its own Values, each remembering where it
// started; the Writer streams, so that the CLI's `--json` output is byte-stable.
#ifndef RAYACCEL_UTIL_JSON_H_
#define RAYACCEL_UTIL_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rayaccel::json {

class Value {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, Value>;

  Value() = default;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  // The number as an exact integer, when it is one (no fraction, no exponent, in range).
  std::optional<int64_t> as_int64() const;
  std::optional<uint64_t> as_uint64() const;
  const std::string& string() const { return text_; }
  const std::vector<Value>& array() const { return items_; }
  const std::vector<Member>& members() const { return members_; }
  // The member named `key`, or nullptr.
  const Value* Find(std::string_view key) const;

  // 1-based position of the value's first character in the parsed text.
  int line() const { return line_; }
  int column() const { return column_; }

  static const char* TypeName(Type type);

 private:
  friend class Parser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string text_;  // string value, or a number's literal text
  std::vector<Value> items_;
  std::vector<Member> members_;
  int line_ = 0;
  int column_ = 0;
};

struct ParseError {
  std::string message;
  int line = 0;
  int column = 0;
};

// Parses one JSON document (RFC 8259, UTF-8; duplicate object keys and nesting deeper than 64
// are errors). Returns nullopt and fills `error` on failure.
std::optional<Value> Parse(std::string_view text, ParseError* error);

// Writes JSON with two-space indentation and members in the order they are added.
class Writer {
 public:
  Writer& BeginObject();
  Writer& EndObject();
  Writer& BeginArray();
  Writer& EndArray();
  Writer& Key(std::string_view key);
  Writer& String(std::string_view value);
  Writer& Int(int64_t value);
  Writer& Uint(uint64_t value);
  Writer& Double(double value);
  Writer& Bool(bool value);
  Writer& Null();
  // A value that is already JSON text (trusted: written by another Writer).
  Writer& Raw(std::string_view json);

  // The document, with a trailing newline.
  std::string Finish();

 private:
  void BeforeValue();
  Writer& Close(char bracket);
  void Newline();
  std::string out_;
  std::vector<bool> has_items_;  // one per open container
  bool after_key_ = false;
};

// `text` as a JSON string literal, quotes included.
std::string Quote(std::string_view text);

}  // namespace rayaccel::json

#endif  // RAYACCEL_UTIL_JSON_H_
