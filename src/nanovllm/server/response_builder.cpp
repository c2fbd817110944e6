#include "nanovllm/server/response_builder.h"

namespace nanovllm::server {

using nlohmann::json;

ResponseBuilder::ResponseBuilder(const GenerationRequest& request, const tokenizer::Tokenizer& tok, std::string id,
                                 int64_t created)
    : request_(request), tok_(tok), id_(std::move(id)), created_(created),
      choices_(static_cast<size_t>(request.num_choices())) {
  for (const auto& p : request.prompts) prompt_tokens_ += static_cast<int64_t>(p.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceState& c = choices_[i];
    if (request.endpoint == Endpoint::kChat && request.output.active()) {
      // Call ids: unique within the response and across responses (the response id is).
      c.parser = std::make_unique<ChatOutputParser>(request.output, [this, i, &c] {
        return "call_" + id_.substr(id_.find('-') + 1) + "_" + std::to_string(i) + "_" + std::to_string(c.next_call_id++);
      });
    }
  }
}

const char* ResponseBuilder::finish_reason_of(const ChoiceState& c) const {
  if (c.parser && c.parser->num_calls() > 0 && c.finish_reason == FinishReason::kStop) return "tool_calls";
  return finish_reason_string(c.finish_reason);
}

json ResponseBuilder::usage() const {
  int64_t completion = 0;
  for (const ChoiceState& c : choices_) completion += c.num_tokens;
  return {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion},
          {"total_tokens", prompt_tokens_ + completion}};
}

json ResponseBuilder::chunk_base() const {
  json j = {{"id", id_},
            {"object", request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", request_.model},
            {"choices", json::array()}};
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

json ResponseBuilder::absorb(const ChoiceEvent& e, bool streaming, ChatDelta* delta) {
  ChoiceState& c = choices_.at(static_cast<size_t>(e.index));
  json lp = nullptr;
  if (request_.want_logprobs && !e.token_ids.empty()) {
    const bool chat = request_.endpoint == Endpoint::kChat;
    if (streaming) lp = chat ? json{{"content", json::array()}} : empty_completion_logprobs();
    for (size_t i = 0; i < e.token_ids.size(); ++i) {
      const std::vector<TokenLogprob> none;
      const auto& lps = i < e.logprobs.size() ? e.logprobs[i] : none;
      if (!streaming) {
        c.tokens.push_back({e.token_ids[i], static_cast<uint32_t>(lps.size()), c.entries.size(), c.text_bytes});
        for (const TokenLogprob& t : lps) c.entries.push_back({static_cast<int32_t>(t.id), t.logprob});
      } else if (chat) {
        lp["content"].push_back(chat_logprob_entry(tok_, e.token_ids[i], lps, request_.top_logprobs));
      } else {
        append_completion_logprob(lp, tok_, e.token_ids[i], lps, request_.top_logprobs, c.text_bytes);
      }
    }
  }
  c.text_bytes += static_cast<int64_t>(e.text.size());
  c.num_tokens += static_cast<int64_t>(e.token_ids.size());
  if (e.finished) c.finish_reason = e.finish_reason;
  if (!c.parser) {
    if (!streaming) c.text += e.text;
    return lp;
  }
  ChatDelta d = c.parser->feed(e.text);
  if (e.finished) {
    ChatDelta rest = c.parser->finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (ToolCallDelta& t : rest.calls) d.calls.push_back(std::move(t));
  }
  if (streaming) {
    if (delta) *delta = std::move(d);
    return lp;
  }
  c.reasoning += d.reasoning;
  c.text += d.content;
  for (const ToolCallDelta& t : d.calls) {
    if (t.id) {
      c.tool_calls.push_back({{"id", *t.id}, {"type", "function"}, {"function", {{"name", t.name.value_or("")}, {"arguments", ""}}}});
    }
    if (c.tool_calls.empty()) continue;  // never: a call's first delta has its id
    json& f = c.tool_calls.back()["function"];
    f["arguments"] = f["arguments"].get<std::string>() + t.arguments;
  }
  return lp;
}

std::vector<json> ResponseBuilder::start_chunks() {
  std::vector<json> out;
  if (request_.endpoint != Endpoint::kChat) return out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    json j = chunk_base();
    j["choices"].push_back({{"index", i},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}});
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<json> ResponseBuilder::chunks(const std::vector<ChoiceEvent>& events) {
  const bool chat = request_.endpoint == Endpoint::kChat;
  std::vector<json> out;
  for (const ChoiceEvent& e : events) {
    ChatDelta parsed;
    json lp = absorb(e, /*streaming=*/true, &parsed);
    const ChoiceState& c = choices_.at(static_cast<size_t>(e.index));
    if (c.parser) {
      if (!parsed.empty() || !lp.is_null()) {
        json delta = json::object();
        if (!parsed.reasoning.empty()) delta["reasoning_content"] = parsed.reasoning;
        if (!parsed.content.empty() || (parsed.reasoning.empty() && parsed.calls.empty())) delta["content"] = parsed.content;
        if (!parsed.calls.empty()) delta["tool_calls"] = tool_call_deltas_json(parsed.calls);
        json j = chunk_base();
        j["choices"].push_back({{"index", e.index}, {"delta", std::move(delta)}, {"logprobs", lp}, {"finish_reason", nullptr}});
        out.push_back(std::move(j));
      }
    } else if (!e.text.empty() || !lp.is_null()) {
      json j = chunk_base();
      json choice = {{"index", e.index}, {"logprobs", lp}, {"finish_reason", nullptr}};
      if (chat) choice["delta"] = {{"content", e.text}};
      else choice["text"] = e.text;
      j["choices"].push_back(std::move(choice));
      out.push_back(std::move(j));
    }
    if (e.finished) {
      json j = chunk_base();
      json choice = {{"index", e.index}, {"logprobs", nullptr}, {"finish_reason", finish_reason_of(c)}};
      if (chat) choice["delta"] = json::object();
      else choice["text"] = "";
      j["choices"].push_back(std::move(choice));
      out.push_back(std::move(j));
    }
  }
  return out;
}

json ResponseBuilder::usage_chunk() const {
  json j = chunk_base();
  j["usage"] = usage();
  return j;
}

void ResponseBuilder::add(const std::vector<ChoiceEvent>& events) {
  for (const ChoiceEvent& e : events) absorb(e, /*streaming=*/false);
}

// The logprobs' JSON, one token at a time (a DOM of all of them would be ~10 KB a token).
std::string ResponseBuilder::logprobs_text(const ChoiceState& c) const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  std::string content, tokens, token_logprobs, top_logprobs, text_offset;
  std::vector<TokenLogprob> lps;
  for (const TokenRecord& t : c.tokens) {
    lps.clear();
    for (size_t k = t.first; k < t.first + t.count; ++k) lps.push_back({c.entries[k].id, c.entries[k].logprob});
    const char* sep = &t == &c.tokens.front() ? "" : ",";
    if (chat) {
      content += sep + dump_json(chat_logprob_entry(tok_, t.token, lps, request_.top_logprobs));
      continue;
    }
    json one = empty_completion_logprobs();
    append_completion_logprob(one, tok_, t.token, lps, request_.top_logprobs, t.text_offset);
    tokens += sep + dump_json(one["tokens"][0]);
    token_logprobs += sep + dump_json(one["token_logprobs"][0]);
    top_logprobs += sep + dump_json(one["top_logprobs"][0]);
    text_offset += sep + dump_json(one["text_offset"][0]);
  }
  if (chat) return "{\"content\":[" + content + "]}";
  return "{\"text_offset\":[" + text_offset + "],\"token_logprobs\":[" + token_logprobs + "],\"tokens\":[" +
         tokens + "],\"top_logprobs\":[" + top_logprobs + "]}";
}

std::string ResponseBuilder::final_response() const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  // Each choice is made and written out in turn, its logprobs (when asked for) spliced in as text where the
  // choice has "logprobs":null — its first such text: the keys before it (finish_reason, index) hold none.
  static const std::string kNullLogprobs = "\"logprobs\":null";
  std::string choices;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", finish_reason_of(c)}};
    if (chat && c.parser) {
      json message = {{"role", "assistant"}};
      message["content"] = c.text.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.text);
      if (request_.output.reasoning) message["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
      if (!c.tool_calls.empty()) message["tool_calls"] = c.tool_calls;
      choice["message"] = std::move(message);
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    std::string text = dump_json(choice);
    if (request_.want_logprobs)
      text.replace(text.find(kNullLogprobs) + kNullLogprobs.size() - 4, 4, logprobs_text(c));
    choices += (i ? "," : "") + text;
  }
  // The same for the choices in the response ("choices" sorts first of its keys).
  const json response = {{"id", id_},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", created_},
                         {"model", request_.model},
                         {"choices", json::array()},
                         {"usage", usage()}};
  std::string out = dump_json(response);
  static const std::string kEmptyChoices = "\"choices\":[]";
  out.insert(out.find(kEmptyChoices) + kEmptyChoices.size() - 1, choices);
  return out;
}

}  // namespace nanovllm::server
