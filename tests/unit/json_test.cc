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
  };
  for (const auto& [text, message, line, column] : cases) {
    ParseError error;
    EXPECT_FALSE(Parse(text, &error)) << text;
    EXPECT_NE(error.message.find(message), std::string::npos) << text << ": " << error.message;
    EXPECT_EQ(error.line, line) << text;
    EXPECT_EQ(error.column, column) << text;
  }
}

TEST(JsonParse, RefusesDeepNesting) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  ParseError error;
  EXPECT_FALSE(Parse(deep, &error));
  EXPECT_NE(error.message.find("nesting"), std::string::npos);
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
