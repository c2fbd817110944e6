// Sequence: one request's tokens, KV blocks and progress through the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/engine/token_constraint.h"

namespace nanovllm {

// A sampled token the engine has not read yet (scheduling ahead: Scheduler::advance); never a real id.
constexpr int32_t kPendingToken = -1;

enum class SequenceStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* to_string(FinishReason r);  // "stop", "length", "abort", ""

struct TokenLogprob {
  int64_t id = 0;
  float logprob = 0.0f;
};

struct Sequence {
  int64_t seq_id = 0;
  std::vector<int32_t> token_ids;       // prompt followed by generated tokens; empty while shared_prompt is set
  // A prompt shared with other sequences (the n choices of one request) while this one waits: the copy in
  // token_ids is made when the scheduler admits it (own_tokens()), when it also takes KV blocks for every
  // token, which cost far more. So waiting requests hold each prompt once, however large n is.
  std::shared_ptr<const std::vector<int32_t>> shared_prompt;
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;      // tokens whose K/V are in the cache
  int64_t num_cached_tokens = 0;        // of the prompt, served by the prefix cache at admission
  std::vector<int32_t> block_table;     // physical KV block ids, in order
  // Mixed into the prefix-cache hash chain when nonzero (h_0 = XXH64(salt ‖ tokens_0), block_hash.h): for
  // requests whose cached K/V depend on more than their tokens. Dual Chunk Attention with logit scaling sets it
  // to the prompt length past original_max_position_embeddings (its keys carry that length's factor).
  uint64_t cache_salt = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  SamplingParams params;
  std::vector<std::vector<TokenLogprob>> logprobs;  // one top-K list per generated token
  uint64_t rng_state = 0;               // per-sequence sampling RNG (seeded when params.seed is set)
  // params.structured_outputs as the engine enforces it (LLMEngine::add_request), or null. Advanced with
  // every sampled token; preemption keeps it (the tokens stay).
  std::shared_ptr<TokenConstraint> constraint;
  int64_t num_preemptions = 0;

  // timings (steady clock)
  std::chrono::steady_clock::time_point arrival_time{};
  std::chrono::steady_clock::time_point first_token_time{};
  std::chrono::steady_clock::time_point finish_time{};

  // The tokens, wherever they are (token_ids, or the shared prompt of a sequence not admitted yet).
  std::span<const int32_t> tokens() const {
    return shared_prompt ? std::span<const int32_t>(*shared_prompt) : std::span<const int32_t>(token_ids);
  }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens().size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_finished() const { return status == SequenceStatus::kFinished; }
  int32_t last_token() const { return tokens().back(); }
  // Copies a shared prompt into token_ids and lets go of it (no-op without one).
  void own_tokens();

  // The prefix-cache hash chain (block_hash.h) over the full blocks of token_ids: block_hashes()[i]
  // names tokens [0, (i + 1) * block_hash_size()), a block and all before it. Each block is hashed once:
  // Scheduler::add starts the chain over the prompt, Scheduler::resolve extends it as generated tokens
  // fill blocks, and the block manager only reads it (admission checks, commits). Preemption by
  // recompute keeps the tokens, so it keeps the chain. Empty when prefix caching is off. Salted by cache_salt.
  const std::vector<uint64_t>& block_hashes() const { return block_hashes_; }
  int64_t block_hash_size() const { return block_hash_size_; }  // tokens per hashed block; 0: no chain
  // Starts the chain over for blocks of `block_size` tokens (0: none) and hashes the full blocks.
  void reset_block_hashes(int64_t block_size);
  // Hashes the blocks filled since the last call. A block ending in kPendingToken (a sampled token not
  // read yet) waits until the token is known: token_ids may change only there, and only at the back.
  void extend_block_hashes();

 private:
  int64_t block_hash_size_ = 0;
  std::vector<uint64_t> block_hashes_;
};

}  // namespace nanovllm
