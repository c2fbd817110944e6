// The request fields that constrain what is generated or shape a chat answer:
//   response_format       {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema, strict}}
//   structured_outputs    vLLM's {json | regex | choice | grammar | json_object}
//   guided_json / guided_regex / guided_choice / guided_grammar   (vLLM's older names, still sent by clients)
//   tools, tool_choice ("none" | "auto" | "required" | {"type": "function", "function": {"name"}}),
//   parallel_tool_calls
// -> SamplingParams::structured_outputs and the chat answer's parsing (ChatOutputOptions). "required" and a
// named function are enforced by a grammar of the model's tool-call format, so even a weak model writes a
// valid call. With a reasoning parser and thinking on, the constraint starts after </think>.
// Every mistake throws ApiException (400) naming the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/server/protocol.h"
#include "nanovllm/server/tool_parser.h"

namespace nanovllm::server {

// body: the request; tools: its `tools` (null when none); prompt_text: the rendered chat prompt (empty for
// completions). Fills r.params.structured_outputs and r.output.
void parse_structured_request(const nlohmann::ordered_json& body, Endpoint endpoint, const ModelContext& ctx,
                              const nlohmann::ordered_json& tools, const std::string& prompt_text, GenerationRequest& r);

// EBNF of between 1 and max_calls (-1: any number of) tool calls in `kind`'s format, to the tools named in
// `names` (empty: any of `tools`). Throws nanovllm::Error for a tool whose parameter schema is unsupported.
std::string tool_call_grammar(ToolParserKind kind, const nlohmann::ordered_json& tools,
                              const std::vector<std::string>& names, int max_calls);

}  // namespace nanovllm::server
