// Structured outputs in the engine: SamplingParams::structured_outputs -> a TokenConstraint per request,
// backed by the grammar engine (grammar/) over the model's tokenizer. Compiled grammars are cached, so
// requests that repeat a schema share one (and its token masks, computed as positions are first reached).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/engine/token_constraint.h"
#include "nanovllm/grammar/compiler.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm {

class StructuredOutputs {
 public:
  // stop_ids: the model's eos ids (they end a constrained answer); vocab_size: the logits' width.
  StructuredOutputs(const Tokenizer& tokenizer, const std::vector<int64_t>& stop_ids, int64_t vocab_size);

  // A new constraint for one request. Throws nanovllm::Error naming an unsupported schema keyword, a bad
  // regex or grammar, or reasoning tags that are not single tokens of the vocabulary.
  std::shared_ptr<TokenConstraint> make_constraint(const StructuredOutputsParams& params);
  // The compiled grammar of `params` (cached): validation without a request.
  std::shared_ptr<const grammar::CompiledGrammar> compile(const StructuredOutputsParams& params);

  grammar::GrammarCompiler& compiler() { return compiler_; }

 private:
  int32_t tag_token(const std::string& tag, const char* field) const;

  const Tokenizer& tokenizer_;
  grammar::GrammarCompiler compiler_;
};

}  // namespace nanovllm
