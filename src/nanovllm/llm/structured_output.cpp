#include "nanovllm/llm/structured_output.h"

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/matcher.h"
#include "nanovllm/llm/token_vocabulary.h"

namespace nanovllm {
namespace {

// A grammar matcher behind the engine's TokenConstraint, with the reasoning phase in front of it: while the
// model reasons every token is allowed, and the grammar takes over after the reasoning's end tag.
class GrammarConstraint final : public TokenConstraint {
 public:
  enum class Phase { kAnswer, kMayReason, kReasoning };

  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> g, Phase phase, int32_t start_id, int32_t end_id)
      : matcher_(std::move(g)), phase_(phase), start_id_(start_id), end_id_(end_id) {}

  bool fill_bitmask(uint32_t* words, int64_t vocab) override {
    NANOVLLM_CHECK(vocab == matcher_.grammar().vocab().vocab_size(), "structured outputs: the logits have ", vocab,
                   " columns; the grammar's vocabulary ", matcher_.grammar().vocab().vocab_size());
    if (phase_ == Phase::kReasoning) return false;
    matcher_.fill_next_token_bitmask(words);
    if (phase_ == Phase::kMayReason) grammar::bitmask_set(words, start_id_);
    return true;
  }

  bool accept(int32_t token) override {
    if (phase_ == Phase::kReasoning) {
      if (token == end_id_) phase_ = Phase::kAnswer;
      return true;
    }
    if (phase_ == Phase::kMayReason) {
      if (token == start_id_) {
        phase_ = Phase::kReasoning;
        return true;
      }
      phase_ = Phase::kAnswer;
    }
    return matcher_.accept_token(token);
  }

  bool is_complete() const override { return phase_ == Phase::kAnswer && matcher_.is_completed(); }

 private:
  grammar::GrammarMatcher matcher_;
  Phase phase_;
  int32_t start_id_, end_id_;
};

}  // namespace

StructuredOutputs::StructuredOutputs(const Tokenizer& tokenizer, const std::vector<int64_t>& stop_ids,
                                     int64_t vocab_size)
    : tokenizer_(tokenizer), compiler_(make_token_vocabulary(tokenizer, stop_ids, vocab_size)) {}

std::shared_ptr<const grammar::CompiledGrammar> StructuredOutputs::compile(const StructuredOutputsParams& p) {
  NANOVLLM_CHECK(p.num_kinds() == 1, "structured_outputs: give exactly one of json, regex, choice, grammar, json_object");
  using grammar::ConstraintKind;
  if (p.json) return compiler_.compile(ConstraintKind::kJsonSchema, *p.json);
  if (p.regex) return compiler_.compile(ConstraintKind::kRegex, *p.regex);
  if (p.grammar) return compiler_.compile(ConstraintKind::kEbnf, *p.grammar);
  if (p.choice) return compiler_.compile(ConstraintKind::kChoice, "", *p.choice);
  return compiler_.compile(ConstraintKind::kJsonObject, "");
}

int32_t StructuredOutputs::tag_token(const std::string& tag, const char* field) const {
  const std::optional<int32_t> id = tokenizer_.token_to_id(tag);
  NANOVLLM_CHECK(id.has_value(), "structured_outputs.", field, " '", tag, "' is not a token of the vocabulary");
  return *id;
}

std::shared_ptr<TokenConstraint> StructuredOutputs::make_constraint(const StructuredOutputsParams& p) {
  std::shared_ptr<const grammar::CompiledGrammar> g = compile(p);
  GrammarConstraint::Phase phase = GrammarConstraint::Phase::kAnswer;
  int32_t start_id = -1, end_id = -1;
  if (!p.reasoning_end.empty()) {
    end_id = tag_token(p.reasoning_end, "reasoning_end");
    if (p.reasoning_open) {
      phase = GrammarConstraint::Phase::kReasoning;
    } else if (!p.reasoning_start.empty()) {
      start_id = tag_token(p.reasoning_start, "reasoning_start");
      phase = GrammarConstraint::Phase::kMayReason;
    }
  }
  return std::make_shared<GrammarConstraint>(std::move(g), phase, start_id, end_id);
}

}  // namespace nanovllm
