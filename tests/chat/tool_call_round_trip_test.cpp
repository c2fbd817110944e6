// The OpenAI tool-calling round trip (user -> assistant tool_calls -> tool result) through the real Qwen3
// chat template (tests/data/qwen3-tokenizer/tokenizer_config.json), as the OpenAI SDKs send it: the
// assistant turn has no text, `arguments` is a JSON *string*, the tool turn carries tool_call_id.
//
// The expected text is derived by hand from the template, step by step (a reference independent of both
// our renderer and jinja2):
//  * `tools` given: "<|im_start|>system\n" + the "# Tools" preamble, each tool as `tool | tojson` (HF's
//    tojson is json.dumps: ", " and ": " separators, key order kept, ensure_ascii=False), the
//    "<tool_call>" instructions, "<|im_end|>\n" (no system message to merge).
//  * last_query_index = 0 (the user turn; the tool turn is not a user turn).
//  * the user turn verbatim.
//  * the assistant turn: content '' (so no '</think>' split, no reasoning); index 1 > 0 but it is not
//    the last message and has no reasoning, so "<|im_start|>assistant\n" + '' ; the tool call gets no
//    leading "\n" (first call, empty content), `tool_call.function` replaces the call, and `arguments`
//    is a string, printed as-is (not re-serialized: transformers leaves it alone).
//  * the tool turn opens "<|im_start|>user" (the previous message is not a tool), wraps the content in
//    <tool_response> and, being last, closes with "<|im_end|>\n".
//  * add_generation_prompt: "<|im_start|>assistant\n" (enable_thinking undefined: nothing more).
// scripts/chat_template_golden.py renders the same conversation ("tool_round_trip_openai", with two tools)
// with jinja2 into tests/data/chat/golden.json (chat_template_golden_test), and
// scripts/chat_template_hf_check.py checks those goldens against transformers' apply_chat_template.
//
// "content": null is rendered as "" by the server (as vLLM does, protocol.cpp): the template itself fails
// on None (`'</think>' in None`), as jinja2 does (golden case error/qwen3_null_content).
#include <gtest/gtest.h>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat {
namespace {

const std::string kConfig = std::string(NANOVLLM_TEST_DATA) + "/qwen3-tokenizer/tokenizer_config.json";

nlohmann::ordered_json round_trip_messages(const nlohmann::ordered_json& assistant_content) {
  return nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc123", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temperature\":18,\"sky\":\"clear\"}"}
  ])")
      .patch(nlohmann::ordered_json::array({{{"op", "replace"}, {"path", "/1/content"}, {"value", assistant_content}}}));
}

nlohmann::ordered_json weather_tool() {
  return nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the weather in a city", "parameters": {"type": "object", "properties":
    {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]}}}])");
}

TEST(ToolCallRoundTrip, Qwen3RendersLikeHf) {
  const auto t = ChatTemplate::from_tokenizer_config(kConfig);
  ChatTemplateOptions opt;
  opt.tools = weather_tool();
  const std::string want =
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      R"({"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city", )"
      R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", )"
      R"("enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}})"
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\":\"Paris\",\"unit\":\"celsius\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n{\"temperature\":18,\"sky\":\"clear\"}\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(t.render(round_trip_messages(""), opt), want);
}

TEST(ToolCallRoundTrip, NullContentFailsInTheTemplateAsInJinja2) {
  // Why the server turns null into "": the template's `'</think>' in message.content` raises on None.
  const auto t = ChatTemplate::from_tokenizer_config(kConfig);
  ChatTemplateOptions opt;
  opt.tools = weather_tool();
  try {
    t.render(round_trip_messages(nullptr), opt);
    ADD_FAILURE() << "rendered a None content";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NoneType"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm::chat
