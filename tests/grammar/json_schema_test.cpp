// JSON Schema -> grammar: texts that validate match, texts that do not are refused; unsupported keywords are
// errors naming them; numeric ranges are exact.
#include <gtest/gtest.h>

#include <string>

#include "grammar/grammar_test_util.h"
#include "nanovllm/grammar/json_schema.h"
#include "support/expect_error.h"

namespace nanovllm::grammar::testing {
namespace {

using nanovllm::testing::expect_error;

std::shared_ptr<const CompiledGrammar> schema(const std::string& text) { return compile(json_schema_grammar(std::string_view(text))); }

TEST(JsonSchema, ObjectsInPropertyOrder) {
  const auto g = schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},
                           "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  for (const char* ok : {R"({"b":1})", R"({"a":"x","b":-2})", R"({"a":"","b":0,"c":true})", R"({"b":3,"c":false})",
                         "{\n  \"a\": \"\\u00e9\\n\",\n  \"b\": 10\n}", R"({ "b" : 5 })"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {R"({})", R"({"a":"x"})", R"({"b":1.5})", R"({"b":01})", R"({"c":true,"b":1})",
                          R"({"b":1,})", R"({"b":1,"d":2})", R"({"a":"\x"})", " {\"b\":1}", "{\"b\":1} ",
                          "{\"a\":\"\n\",\"b\":1}", R"({"b":-0})"})
    EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(JsonSchema, AllOptionalProperties) {
  const auto g = schema(R"({"properties":{"x":{"const":1},"y":{"enum":["a",null,[1,2]]},"z":{}}})");
  for (const char* ok : {"{}", R"({"x":1})", R"({"y":null})", R"({"y":[1,2]})", R"({"x":1,"z":{"q":[]}})",
                         R"({"z":"s"})", R"({"x":1,"y":"a","z":0})"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {R"({"x":2})", R"({"y":"b"})", R"({"z":1,"x":1})", R"({"x":1,})"})
    EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(JsonSchema, FreeKeysAndAnyValues) {
  const auto g = schema(R"({"type":"object","additionalProperties":{"type":"array","items":{"type":"number"}}})");
  EXPECT_TRUE(matches(g, R"({"any key":[1,2.5e3,-0.5],"k2":[]})"));
  EXPECT_FALSE(matches(g, R"({"k":["s"]})"));
  const auto object = compile(json_object_grammar());
  EXPECT_TRUE(matches(object, R"({"a":{"b":[true,false,null,"x",{"c":-1.0E+2}]}})"));
  EXPECT_FALSE(matches(object, "[1]"));
  EXPECT_FALSE(matches(object, R"({"a":tru})"));
}

TEST(JsonSchema, ArraysWithPrefixAndBounds) {
  const auto g = schema(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
                           "items":{"type":"boolean"},"minItems":1,"maxItems":4})");
  for (const char* ok : {R"(["a"])", R"(["a",1])", R"(["a",1,true])", R"(["a",1,true,false])"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"[]", R"(["a",1,true,false,true])", R"([1])", R"(["a","b"])", R"(["a",1,2])"})
    EXPECT_FALSE(matches(g, bad)) << bad;
  const auto closed = schema(R"({"prefixItems":[{"const":"x"}],"items":false})");
  EXPECT_TRUE(matches(closed, "[]"));
  EXPECT_TRUE(matches(closed, R"(["x"])"));
  EXPECT_FALSE(matches(closed, R"(["x","x"])"));
  const auto tuple7 = schema(R"({"items":[{"type":"null"}],"additionalItems":{"type":"string"},"minItems":2})");
  EXPECT_TRUE(matches(tuple7, R"([null,"s","t"])"));
  EXPECT_FALSE(matches(tuple7, R"([null])"));
}

TEST(JsonSchema, StringsLengthPatternFormat) {
  const auto len = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(matches(len, "\"ab\""));
  EXPECT_TRUE(matches(len, "\"\xe4\xb8\xad\\n\\u0041\""));  // code points, escapes count once
  EXPECT_FALSE(matches(len, "\"a\""));
  EXPECT_FALSE(matches(len, "\"abcd\""));
  const auto pat = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(matches(pat, "\"AB-12\""));
  EXPECT_FALSE(matches(pat, "\"Ab-12\""));
  const auto quote = schema(R"({"type":"string","pattern":"^a\"b$"})");
  EXPECT_TRUE(matches(quote, R"("a\"b")"));
  const auto date = schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(matches(date, "\"2024-02-28T23:59:01.5+05:30\""));
  EXPECT_FALSE(matches(date, "\"2024-02-30T23:59:01Z\""));  // only days every month has
  EXPECT_TRUE(matches(schema(R"({"format":"uuid"})"), "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(matches(schema(R"({"format":"ipv4"})"), "\"192.168.0.255\""));
  EXPECT_FALSE(matches(schema(R"({"format":"ipv4"})"), "\"192.168.0.256\""));
  EXPECT_TRUE(matches(schema(R"({"format":"email"})"), "\"a.b+c@example.co.uk\""));
}

TEST(JsonSchema, IntegerRangesAreExact) {
  struct Case {
    const char* schema;
    int lo, hi;
  };
  for (const Case& c : {Case{R"({"type":"integer","minimum":-37,"maximum":215})", -37, 215},
                        Case{R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":101})", 10, 100},
                        Case{R"({"type":"integer","minimum":-1000,"maximum":-99})", -1000, -99},
                        Case{R"({"type":"integer","minimum":7.5,"maximum":20.2})", 8, 20},
                        Case{R"({"type":"integer","minimum":0,"maximum":0})", 0, 0}}) {
    const auto g = schema(c.schema);
    for (int v = -1500; v <= 1500; ++v) ASSERT_EQ(matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
    EXPECT_FALSE(matches(g, "1.0")) << c.schema;
  }
  const auto open = schema(R"({"type":"integer","minimum":95})");
  EXPECT_TRUE(matches(open, "95"));
  EXPECT_TRUE(matches(open, "123456789012"));
  EXPECT_FALSE(matches(open, "94"));
  EXPECT_FALSE(matches(open, "-100"));
}

TEST(JsonSchema, NumberRanges) {
  const auto g = schema(R"({"type":"number","minimum":-2,"exclusiveMaximum":3})");
  for (const char* ok : {"-2", "-2.0", "-1.999", "0", "0.5", "2.9999", "-0.25", "2"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"-2.01", "3", "3.0", "10", "-3", "1e2", "-0", ".5"}) EXPECT_FALSE(matches(g, bad)) << bad;
  const auto pos = schema(R"({"type":"number","exclusiveMinimum":0})");
  EXPECT_TRUE(matches(pos, "0.001"));
  EXPECT_TRUE(matches(pos, "7"));
  EXPECT_FALSE(matches(pos, "0"));
  EXPECT_FALSE(matches(pos, "0.000"));
  EXPECT_FALSE(matches(pos, "-1"));
  // Bounds between whole numbers are rounded inward: what is generated stays valid.
  const auto inner = schema(R"({"type":"number","minimum":0.5,"exclusiveMaximum":2.5})");
  for (const char* ok : {"1", "1.75", "2", "2.0"}) EXPECT_TRUE(matches(inner, ok)) << ok;
  for (const char* bad : {"0.7", "0", "2.25", "3"}) EXPECT_FALSE(matches(inner, bad)) << bad;
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"type":"number","minimum":0.2,"maximum":0.8})")); },
               {"#", "no number between"});
}

TEST(JsonSchema, CombinatorsAndRefs) {
  const auto g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(matches(g, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(matches(g, R"({"v":1,"next":{"v":2}})"));
  const auto one = schema(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})");
  EXPECT_TRUE(matches(one, "\"s\""));
  EXPECT_TRUE(matches(one, "12"));
  const auto tagged = schema(R"({"oneOf":[{"properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},
                                          {"properties":{"k":{"const":"b"}},"required":["k"]}]})");
  EXPECT_TRUE(matches(tagged, R"({"k":"a","x":1})"));
  EXPECT_TRUE(matches(tagged, R"({"k":"b"})"));
  const auto all = schema(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"required":["b"]}]})");
  EXPECT_TRUE(matches(all, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(matches(all, R"({"a":1})"));
  const auto distributed = schema(R"({"type":"object","required":["x"],"anyOf":[{"properties":{"x":{"type":"string"}}},
                                                                                 {"properties":{"x":{"type":"null"}}}]})");
  EXPECT_TRUE(matches(distributed, R"({"x":null})"));
  EXPECT_FALSE(matches(distributed, R"({})"));
  const auto root_ref = schema(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})");
  EXPECT_TRUE(matches(root_ref, "[[],[[]]]"));
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsNamingThem) {
  for (const char* kw : {"not", "if", "patternProperties", "multipleOf", "minProperties", "contains", "propertyNames"}) {
    const std::string s = std::string(R"({"type":"object","properties":{"a":{")") + kw + R"(":{}}}})";
    expect_error([&] { (void)json_schema_grammar(std::string_view(s)); },
                 {std::string("keyword '") + kw + "'", "#/properties/a"});
  }
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"uniqueItems":true})")); }, {"uniqueItems"});
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"oneOf":[{"type":"number"},{"minimum":1}]})")); },
               {"oneOf branches 0 and 1"});
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"$ref":"http://x/y"})")); }, {"outside this schema"});
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"format":"ulid"})")); }, {"format 'ulid'"});
  expect_error([] { (void)json_schema_grammar(std::string_view(R"({"type":"strng"})")); }, {"unknown type \"strng\""});
  expect_error([] { (void)json_schema_grammar(std::string_view("{nope")); }, {"not valid JSON"});
  expect_error([] { (void)json_schema_grammar(std::string_view("false")); }, {"allows no value"});
  // Not JSON Schema at all: ignored like validators ignore it.
  EXPECT_TRUE(matches(schema(R"({"type":"integer","x-vendor":{"not":1}})"), "3"));
}

}  // namespace
}  // namespace nanovllm::grammar::testing
