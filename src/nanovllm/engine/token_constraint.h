// TokenConstraint: a per-request rule on which token may come next (structured outputs: a JSON schema, a
// regex, a grammar). The engine knows only this interface; llm/ implements it with the grammar engine.
// The samplers (CPU and GPU) ask for the allowed set before sampling a request's token and mask every other
// logit to -inf; the scheduler reports each sampled token and finishes the request (finish_reason "stop")
// once the constrained text is complete.
#pragma once

#include <cstdint>

namespace nanovllm {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // words: [(vocab + 31) / 32] u32; bit (t % 32) of word t / 32 set = token t may come next. Returns false
  // when every token is allowed at this step (no mask to apply: the model is still reasoning before a
  // constrained answer); the words are then unspecified. Host work: the runners call it while the step's
  // forward pass runs on the device.
  virtual bool fill_bitmask(uint32_t* words, int64_t vocab) = 0;
  // The token sampled for this request; false when the constraint does not allow it (the engine then
  // aborts the request: a mask was not applied).
  virtual bool accept(int32_t token) = 0;
  // The constrained text is whole and nothing may follow it.
  virtual bool is_complete() const = 0;
};

}  // namespace nanovllm
