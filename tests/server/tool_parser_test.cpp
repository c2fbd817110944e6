// The chat answer parsers on hand-written model outputs: Qwen3's <think> reasoning, hermes and qwen3_coder
// tool calls (several per turn, text before a call, malformed JSON -> content, partial tags, cut-off
// answers), fed whole and in pieces of every size: streaming must add up to the whole parse.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "nanovllm/grammar/automaton.h"
#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/ebnf.h"
#include "nanovllm/grammar/matcher.h"
#include "nanovllm/server/chat_output.h"
#include "nanovllm/server/reasoning_parser.h"
#include "nanovllm/server/structured_request.h"
#include "nanovllm/server/tool_parser.h"

namespace nanovllm::server {
namespace {

using ordered_json = nlohmann::ordered_json;

struct Parsed {
  std::string reasoning, content;
  std::vector<std::string> ids, names, arguments;  // per call
  int64_t num_calls = 0;
};

// Feeds `text` in pieces of `chunk` bytes (0: whole) and merges the deltas as a client would.
Parsed parse(const ChatOutputOptions& opt, const std::string& text, size_t chunk) {
  int next = 0;
  ChatOutputParser p(opt, [&] { return "call_" + std::to_string(next++); });
  Parsed out;
  auto add = [&](const ChatDelta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.id) {
        EXPECT_EQ(c.index, static_cast<int64_t>(out.ids.size())) << "indices count up from 0";
        ASSERT_TRUE(c.name.has_value()) << "a call's first delta names it";
        out.ids.push_back(*c.id);
        out.names.push_back(*c.name);
        out.arguments.emplace_back();
      }
      ASSERT_FALSE(out.arguments.empty()) << "arguments before the call's first delta";
      EXPECT_EQ(c.index, static_cast<int64_t>(out.ids.size()) - 1);
      out.arguments.back() += c.arguments;
    }
  };
  if (chunk == 0) {
    add(p.feed(text));
  } else {
    for (size_t i = 0; i < text.size(); i += chunk) add(p.feed(text.substr(i, chunk)));
  }
  add(p.finish());
  out.num_calls = p.num_calls();
  return out;
}

ChatOutputOptions hermes() {
  ChatOutputOptions o;
  o.tool_parser = ToolParserKind::kHermes;
  return o;
}

// Parsed the same whole and in pieces of 1..7 and 13 bytes.
Parsed parse_all_ways(const ChatOutputOptions& opt, const std::string& text) {
  const Parsed whole = parse(opt, text, 0);
  for (size_t chunk : {1, 2, 3, 5, 7, 13}) {
    const Parsed s = parse(opt, text, chunk);
    EXPECT_EQ(s.reasoning, whole.reasoning) << "chunk " << chunk;
    EXPECT_EQ(s.content, whole.content) << "chunk " << chunk;
    EXPECT_EQ(s.names, whole.names) << "chunk " << chunk;
    EXPECT_EQ(s.arguments, whole.arguments) << "chunk " << chunk;
  }
  return whole;
}

TEST(ToolParser, HermesSeveralCallsAndTextBefore) {
  const std::string text =
      "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET \\\"x\\\"\"}}\n</tool_call>";
  const Parsed p = parse_all_ways(hermes(), text);
  EXPECT_EQ(p.content, "Let me check both.\n");
  ASSERT_EQ(p.names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(ordered_json::parse(p.arguments[0]), ordered_json::parse(R"({"city": "Paris", "days": [1, 2]})"));
  EXPECT_EQ(ordered_json::parse(p.arguments[1]), ordered_json::parse(R"({"tz": "CET \"x\""})"));
  EXPECT_EQ(p.ids, (std::vector<std::string>{"call_0", "call_1"}));
  EXPECT_EQ(p.num_calls, 2);
}

TEST(ToolParser, HermesMalformedJsonIsContent) {
  for (const std::string bad : {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
                                "<tool_call>\nnot json at all\n</tool_call>",
                                "<tool_call>\n{\"arguments\": {}}\n</tool_call>",  // no name
                                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}} trailing\n</tool_call>"}) {
    const Parsed whole = parse(hermes(), "Hi " + bad, 0);
    EXPECT_EQ(whole.content, "Hi " + bad);
    EXPECT_TRUE(whole.names.empty()) << bad;
    EXPECT_EQ(whole.num_calls, 0);
    for (size_t chunk : {1, 4}) {  // streamed: no crash; what was not sent as a call is content
      const Parsed s = parse(hermes(), "Hi " + bad, chunk);
      EXPECT_EQ(s.content.substr(0, 3), "Hi ") << bad;
      EXPECT_LE(s.names.size(), 1u) << bad;
    }
  }
  // A well-formed call after a malformed one is still a call.
  const Parsed p = parse_all_ways(hermes(), "<tool_call>\n{oops}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", "
                                            "\"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(p.content, "<tool_call>\n{oops}\n</tool_call>");
  EXPECT_EQ(p.names, std::vector<std::string>{"g"});
  EXPECT_EQ(p.arguments, std::vector<std::string>{"{}"});
}

TEST(ToolParser, HermesOtherKeyOrderAndStringArguments) {
  const Parsed p = parse(hermes(), "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>", 0);
  EXPECT_EQ(p.names, std::vector<std::string>{"f"});
  EXPECT_EQ(ordered_json::parse(p.arguments[0]), ordered_json::parse(R"({"x": 1})"));
  const Parsed q = parse(hermes(), "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"y\\\": 2}\"}</tool_call>", 0);
  EXPECT_EQ(q.arguments, std::vector<std::string>{"{\"y\": 2}"});
}

TEST(ToolParser, PartialTagsAndCutOffAnswers) {
  // Text that only looks like the start of a tag is content in the end.
  EXPECT_EQ(parse_all_ways(hermes(), "a <tool_ca").content, "a <tool_ca");
  EXPECT_EQ(parse_all_ways(hermes(), "x < y and <tool>").content, "x < y and <tool>");
  // Cut off (max_tokens) before the name is known: content; after it: the call with what was sent.
  EXPECT_EQ(parse(hermes(), "<tool_call>\n{\"na", 1).content, "<tool_call>\n{\"na");
  const Parsed cut = parse(hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"ab", 1);
  EXPECT_EQ(cut.names, std::vector<std::string>{"f"});
  EXPECT_EQ(cut.arguments, std::vector<std::string>{"{\"q\": \"ab"});
  EXPECT_EQ(cut.content, "");
}

TEST(ToolParser, StreamedArgumentsArriveInPieces) {
  int next = 0;
  ChatOutputParser p(hermes(), [&] { return "id" + std::to_string(next++); });
  ChatDelta d = p.feed("<tool_call>\n{\"name\": \"search\", \"arguments\": ");
  ASSERT_EQ(d.calls.size(), 1u);  // the name as soon as it is known
  EXPECT_EQ(d.calls[0].name, "search");
  EXPECT_EQ(d.calls[0].arguments, "");
  d = p.feed("{\"query\": \"cats");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_FALSE(d.calls[0].id.has_value());
  EXPECT_EQ(d.calls[0].arguments, "{\"query\": \"cats");
  d = p.feed("\"}}\n</tool");
  EXPECT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "\"}");
  d = p.feed("_call>");
  EXPECT_TRUE(d.empty());
  d = p.finish();
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(p.num_calls(), 1);
}

ChatOutputOptions coder() {
  ChatOutputOptions o;
  o.tool_parser = ToolParserKind::kQwen3Coder;
  o.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "write_file", "parameters": {
      "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
      "mode": {"type": "integer"}, "force": {"type": "boolean"}, "opts": {"type": "object"}}}}}])");
  return o;
}

TEST(ToolParser, Qwen3CoderXml) {
  const std::string text =
      "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
      "<parameter=content>\ndef f():\n    return \"<x>\"\n</parameter>\n<parameter=mode>\n644\n</parameter>\n"
      "<parameter=force>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=write_file>\n</function>\n</tool_call>";
  const Parsed p = parse_all_ways(coder(), text);
  EXPECT_EQ(p.content, "I'll write it.\n");
  ASSERT_EQ(p.names, (std::vector<std::string>{"write_file", "write_file"}));
  EXPECT_EQ(ordered_json::parse(p.arguments[0]),
            ordered_json::parse(R"({"path": "/tmp/a.py", "content": "def f():\n    return \"<x>\"", "mode": 644,
                                    "force": true, "opts": {"a": [1]}})"));
  EXPECT_EQ(p.arguments[1], "{}");
}

TEST(ToolParser, Qwen3CoderMalformedIsContent) {
  const std::string bad = "<tool_call>\nno function here\n</tool_call>";
  EXPECT_EQ(parse_all_ways(coder(), bad).content, bad);
  // An untyped value that is not JSON stays a string.
  const Parsed p = parse(coder(), "<tool_call><function=other><parameter=v>\nhello world\n</parameter></function></tool_call>", 0);
  EXPECT_EQ(ordered_json::parse(p.arguments[0]), ordered_json::parse(R"({"v": "hello world"})"));
}

TEST(ReasoningParser, ThinkTagsSplitReasoningFromContent) {
  ChatOutputOptions o;
  o.reasoning = true;
  Parsed p = parse_all_ways(o, "<think>\nLet me think.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(p.reasoning, "Let me think.\n");
  EXPECT_EQ(p.content, "The answer is 4.");
  p = parse_all_ways(o, "No tags: all content <think>?");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "No tags: all content <think>?");
  p = parse_all_ways(o, "<think>cut off while thinking");  // max_tokens inside the reasoning
  EXPECT_EQ(p.reasoning, "cut off while thinking");
  EXPECT_EQ(p.content, "");
  o.starts_in_reasoning = true;  // the prompt opened <think>
  p = parse_all_ways(o, "still thinking</think>done");
  EXPECT_EQ(p.reasoning, "still thinking");
  EXPECT_EQ(p.content, "done");
}

TEST(ReasoningParser, ThenToolCalls) {
  ChatOutputOptions o = hermes();
  o.reasoning = true;
  // A <tool_call> inside the reasoning is reasoning, not a call.
  const Parsed p = parse_all_ways(o, "<think>maybe <tool_call> later</think>\n\n<tool_call>\n{\"name\": \"f\", "
                                     "\"arguments\": {\"a\": true}}\n</tool_call>");
  EXPECT_EQ(p.reasoning, "maybe <tool_call> later");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.names, std::vector<std::string>{"f"});
}

TEST(ToolParser, ParserFromTemplate) {
  EXPECT_EQ(tool_parser_for_template("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}"), ToolParserKind::kHermes);
  EXPECT_EQ(tool_parser_for_template("<tool_call>\n<function=' ~ name ~ '>\n<parameter=' ~ k"),
            ToolParserKind::kQwen3Coder);
  EXPECT_EQ(tool_parser_for_template("{{ messages }}"), ToolParserKind::kNone);
  EXPECT_EQ(tool_parser_from_name("hermes"), ToolParserKind::kHermes);
  EXPECT_FALSE(tool_parser_from_name("mistral").has_value());
}

}  // namespace
}  // namespace nanovllm::server

// The grammars that enforce tool_choice "required" / a named function: what they accept is what the
// parsers read back as calls.
namespace nanovllm::server {
namespace {

bool grammar_matches(const std::string& ebnf, const std::string& text) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  auto vocab = std::make_shared<const grammar::TokenVocabulary>(bytes, std::vector<int32_t>{}, std::vector<int32_t>{}, 256);
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(grammar::compile_grammar(grammar::parse_ebnf(ebnf)), vocab);
  grammar::GrammarMatcher m(compiled);
  return m.accept_bytes(text) && m.can_terminate();
}

TEST(ToolCallGrammar, HermesRequiredAndNamed) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping"}}])");
  const std::string any = tool_call_grammar(ToolParserKind::kHermes, tools, {}, -1);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const std::string ping = "<tool_call>\n{\"name\":\"ping\",\"arguments\":{}}\n</tool_call>";
  EXPECT_TRUE(grammar_matches(any, call));
  EXPECT_TRUE(grammar_matches(any, call + "\n" + ping));
  EXPECT_FALSE(grammar_matches(any, ""));  // required: at least one
  EXPECT_FALSE(grammar_matches(any, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(grammar_matches(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  const std::string one = tool_call_grammar(ToolParserKind::kHermes, tools, {"ping"}, 1);
  EXPECT_TRUE(grammar_matches(one, ping));
  EXPECT_FALSE(grammar_matches(one, call));
  EXPECT_FALSE(grammar_matches(one, ping + "\n" + ping));
  // What the grammar accepts parses back into the call.
  const Parsed p = parse(hermes(), call + "\n" + ping, 0);
  EXPECT_EQ(p.names, (std::vector<std::string>{"get_weather", "ping"}));
}

TEST(ToolCallGrammar, Qwen3CoderXml) {
  const std::string g = tool_call_grammar(ToolParserKind::kQwen3Coder, coder().tools, {"write_file"}, 1);
  const std::string call =
      "<tool_call>\n<function=write_file>\n<parameter=path>\n/a/b.py\n</parameter>\n<parameter=content>\nx < y\n"
      "if a</b: pass\n</parameter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(grammar_matches(g, call));
  EXPECT_TRUE(grammar_matches(g, "<tool_call>\n<function=write_file>\n</function>\n</tool_call>"));  // all optional
  EXPECT_FALSE(grammar_matches(g, "<tool_call>\n<function=write_file>\n<parameter=mode>\nabc\n</parameter>\n"
                                  "</function>\n</tool_call>"));  // an integer parameter
  // A string value cannot contain the closing tag.
  EXPECT_FALSE(grammar_matches(g, "<tool_call>\n<function=write_file>\n<parameter=path>\na</parameter>b\n</parameter>\n"
                                  "</function>\n</tool_call>"));
  const Parsed p = parse(coder(), call, 0);
  ASSERT_EQ(p.names, std::vector<std::string>{"write_file"});
  EXPECT_EQ(ordered_json::parse(p.arguments[0]),
            ordered_json::parse(R"({"path": "/a/b.py", "content": "x < y\nif a</b: pass", "mode": 420})"));
}

}  // namespace
}  // namespace nanovllm::server
