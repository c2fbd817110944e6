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
    c.logprobs = request.endpoint == Endpoint::kChat ? json::array() : empty_completion_logprobs();
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

json ResponseBuilder::absorb(const ChoiceEvent& e, ChatDelta* delta) {
  ChoiceState& c = choices_.at(static_cast<size_t>(e.index));
  json lp = nullptr;
  if (request_.want_logprobs && !e.token_ids.empty()) {
    const bool chat = request_.endpoint == Endpoint::kChat;
    lp = chat ? json{{"content", json::array()}} : empty_completion_logprobs();
    for (size_t i = 0; i < e.token_ids.size(); ++i) {
      const std::vector<TokenLogprob> none;
      const auto& lps = i < e.logprobs.size() ? e.logprobs[i] : none;
      if (chat) {
        json entry = chat_logprob_entry(tok_, e.token_ids[i], lps, request_.top_logprobs);
        lp["content"].push_back(entry);
        c.logprobs.push_back(std::move(entry));
      } else {
        const auto offset = static_cast<int64_t>(c.text.size());
        append_completion_logprob(lp, tok_, e.token_ids[i], lps, request_.top_logprobs, offset);
        append_completion_logprob(c.logprobs, tok_, e.token_ids[i], lps, request_.top_logprobs, offset);
      }
    }
  }
  c.num_tokens += static_cast<int64_t>(e.token_ids.size());
  if (e.finished) c.finish_reason = e.finish_reason;
  if (!c.parser) {
    c.text += e.text;
    return lp;
  }
  ChatDelta d = c.parser->feed(e.text);
  if (e.finished) {
    ChatDelta rest = c.parser->finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (ToolCallDelta& t : rest.calls) d.calls.push_back(std::move(t));
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
  if (delta) *delta = std::move(d);
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
    json lp = absorb(e, &parsed);
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
  for (const ChoiceEvent& e : events) absorb(e);
}

json ResponseBuilder::final_response() const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    json lp = nullptr;
    if (request_.want_logprobs) lp = chat ? json{{"content", c.logprobs}} : c.logprobs;
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", finish_reason_of(c)}};
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
    choices.push_back(std::move(choice));
  }
  return {{"id", id_},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", request_.model},
          {"choices", std::move(choices)},
          {"usage", usage()}};
}

}  // namespace nanovllm::server
