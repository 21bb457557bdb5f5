#include "util/json.h"

#include "gtest/gtest.h"

namespace rayaccel::json {
namespace {

TEST(JsonParse, ValuesAndPositions) {
  ParseError error;
  std::optional<Value> v =
      Parse("{\n  \"a\": [1, -2.5e3, true, null],\n  \"b\": \"x\\u00e9\"\n}", &error);
  ASSERT_TRUE(v) << error.message;
  const Value* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array().size(), 4u);
  EXPECT_EQ(a->array()[0].as_int64(), 1);
  EXPECT_DOUBLE_EQ(a->array()[1].number(), -2500);
  EXPECT_FALSE(a->array()[1].as_int64());
  EXPECT_TRUE(a->array()[2].bool_value());
  EXPECT_TRUE(a->array()[3].is_null());
  EXPECT_EQ(v->Find("b")->string(), "x\xc3\xa9");
  EXPECT_EQ(a->line(), 2);
  EXPECT_EQ(a->column(), 8);
}

// Every value, however it ends (a number read one character past, a string with escapes, a
// literal, a closed container), is placed at its first character.
TEST(JsonParse, EveryValueKnowsWhereItStarts) {
  const std::string text =
      "[ 10 ,\"q\\\"\\u00e9,\" ,\n\t{\"k\" :false, \"l\":[[], 0.5e1 ]},\r\n null,-0]";
  std::optional<Value> v = Parse(text, nullptr);
  ASSERT_TRUE(v);
  const auto& items = v->array();
  ASSERT_EQ(items.size(), 5u);
  const auto at = [](const Value& value) { return std::make_pair(value.line(), value.column()); };
  EXPECT_EQ(at(*v), std::make_pair(1, 1));
  EXPECT_EQ(at(items[0]), std::make_pair(1, 3));
  EXPECT_EQ(items[0].as_int64(), 10);
  EXPECT_EQ(at(items[1]), std::make_pair(1, 7));
  EXPECT_EQ(items[1].string(), "q\"\xc3\xa9,");
  EXPECT_EQ(at(items[2]), std::make_pair(2, 2));
  EXPECT_EQ(at(*items[2].Find("k")), std::make_pair(2, 8));
  const Value& l = *items[2].Find("l");
  EXPECT_EQ(at(l), std::make_pair(2, 19));
  EXPECT_EQ(at(l.array()[0]), std::make_pair(2, 20));
  EXPECT_EQ(at(l.array()[1]), std::make_pair(2, 24));
  EXPECT_EQ(l.array()[1].as_int64(), std::nullopt);
  EXPECT_DOUBLE_EQ(l.array()[1].number(), 5);
  EXPECT_EQ(at(items[3]), std::make_pair(3, 2));
  EXPECT_EQ(at(items[4]), std::make_pair(3, 7));
  EXPECT_EQ(items[4].as_int64(), 0);
}

TEST(JsonParse, BigUnsignedStaysExact) {
  std::optional<Value> v = Parse("18446744073709551615", nullptr);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->as_uint64(), 18446744073709551615ull);
  EXPECT_FALSE(Parse("18446744073709551616", nullptr)->as_uint64());
}

TEST(JsonParse, ErrorsSayWhere) {
  const std::tuple<const char*, const char*, int, int> cases[] = {
      {"{\"a\": 1,\n \"a\": 2}", "duplicate member", 2, 2},
      {"[1, 2", "expected ',' or ']'", 1, 6},
      {"{\"a\" 1}", "expected ':'", 1, 6},
      {"\"abc", "unterminated string", 1, 5},
      {"01", "unexpected text", 1, 2},
      {"[1,]", "unexpected character", 1, 4},
      {"\"\\ud800\"", "unpaired surrogate", 1, 8},
      {"", "unexpected end", 1, 1},
      {"[1 :2]", "expected ',' or ']'", 1, 4},
      {"{\"a\":1 \"b\":2}", "expected ',' or '}'", 1, 8},
      {"[1,,2]", "unexpected character", 1, 4},
      {"[1:", "expected ',' or ']'", 1, 3},
      {"[1, 2  ", "expected ',' or ']'", 1, 8},
      {"{1: 2}", "expected a member name", 1, 2},
      {"[tru]", "invalid literal", 1, 2},
      {"[1, @]", "unexpected character", 1, 5},
      {"[-]", "invalid number", 1, 2},
      {"[1.]", "digits expected after '.'", 1, 2},
      {"1e+", "digits expected in exponent", 1, 1},
      {"[1e999]", "out of range", 1, 2},
      {"\"a\nb\"", "control character", 1, 3},
      {"\"\\x\"", "invalid escape", 1, 3},
      {"\"\\u12G4\"", "invalid \\u escape", 1, 6},
      {"\"\\udc00\"", "unpaired surrogate", 1, 7},
      {"[\"\xff\"]", "invalid UTF-8", 1, 3},
      {"{\"a\": {\"b\": 1, \"b\": 2}}", "duplicate member \"b\"", 1, 16},
  };
  for (const auto& [text, message, line, column] : cases) {
    ParseError error;
    EXPECT_FALSE(Parse(text, &error)) << text;
    EXPECT_NE(error.message.find(message), std::string::npos) << text << ": " << error.message;
    EXPECT_EQ(error.line, line) << text;
    EXPECT_EQ(error.column, column) << text << ": " << error.message;
  }
}

TEST(JsonParse, RefusesDeepNesting) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  ParseError error;
  EXPECT_FALSE(Parse(deep, &error));
  EXPECT_NE(error.message.find("nesting"), std::string::npos);
}

TEST(JsonWriter, WritesValidJsonWhateverTheBytes) {
  Writer w;
  w.BeginArray().String("a\xffz").Double(0.1).Double(-3).Double(1e300).EndArray();
  EXPECT_EQ(w.Finish(), "[\n  \"a\xef\xbf\xbdz\",\n  0.1,\n  -3,\n  1e+300\n]\n");
  EXPECT_EQ(Quote("\x01\"\\\t"), "\"\\u0001\\\"\\\\\\t\"");
}

TEST(JsonWriter, RoundTrips) {
  Writer w;
  w.BeginObject();
  w.Key("s").String("q\"\n\x01");
  w.Key("n").Double(8);
  w.Key("f").Double(0.5);
  w.Key("e").BeginArray().EndArray();
  w.Key("l").BeginArray().Int(-1).Uint(2).Bool(false).Null().EndArray();
  w.EndObject();
  std::string text = w.Finish();
  ParseError error;
  std::optional<Value> v = Parse(text, &error);
  ASSERT_TRUE(v) << error.message << "\n" << text;
  EXPECT_EQ(v->Find("s")->string(), "q\"\n\x01");
  EXPECT_EQ(v->Find("n")->as_int64(), 8);  // whole numbers print without a fraction
  EXPECT_DOUBLE_EQ(v->Find("f")->number(), 0.5);
  EXPECT_EQ(v->Find("l")->array().size(), 4u);
  EXPECT_NE(text.find("\"e\": []"), std::string::npos);
}

}  // namespace
}  // namespace rayaccel::json
