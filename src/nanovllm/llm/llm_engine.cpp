#include "nanovllm/llm/llm_engine.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include "nanovllm/core/logging.h"
#include "nanovllm/engine/scheduler.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/llm/structured_output.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/runner/tensor_parallel_worker.h"
#include "nanovllm/sparse/policies.h"

namespace nanovllm {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

RequestOutput make_output(Sequence& seq) {
  RequestOutput o;
  o.request_id = seq.seq_id;
  const std::span<const int32_t> tokens = seq.tokens();
  o.prompt_token_ids.assign(tokens.begin(), tokens.begin() + seq.num_prompt_tokens);
  o.token_ids.assign(tokens.begin() + seq.num_prompt_tokens, tokens.end());
  o.finish_reason = seq.finish_reason;
  o.logprobs = std::move(seq.logprobs);
  o.num_cached_tokens = seq.num_cached_tokens;
  o.num_preemptions = seq.num_preemptions;
  o.time_to_first_token_s = seconds_between(seq.arrival_time, seq.first_token_time);
  o.latency_s = seconds_between(seq.arrival_time, seq.finish_time);
  o.finished = seq.is_finished();
  return o;
}

// The offload lane's scheduler config: up to offload.max_num_seqs sequences, each prompt whole in one
// (layer-wise) step; its blocks count host pool blocks, enough for that many max_model_len sequences (the
// host memory check comes first), so it never preempts, and its token budget holds every decode: each step
// lists every running sequence, which the offload runner's lanes rely on. Its own engine RNG stream.
EngineConfig offload_lane_config(const EngineConfig& config) {
  EngineConfig lane = config;
  lane.scheduler.max_num_seqs = config.offload.max_num_seqs;
  lane.scheduler.max_num_batched_tokens = config.model.max_model_len + config.offload.max_num_seqs;
  lane.scheduler.enable_chunked_prefill = false;
  lane.cache.block_size = config.offload.block_size;
  lane.cache.num_kv_blocks = config.offload.max_num_seqs * lane.blocks_per_max_len_seq();
  lane.cache.enable_prefix_caching = false;
  lane.model.seed = config.model.seed ^ 0x6f66666c6f616421ULL;
  return lane;
}

// Dual Chunk Attention (docs/dual_chunk_attention.md) runs on every path, the sparse policies included; a checkpoint
// that asks for it never runs plain attention instead. Sparse prefill's pattern blocks must not straddle a chunk
// (docs/sparse_attention.md, "With Dual Chunk Attention"). On CUDA its kernels need a chunk of whole 128-key tiles
// (unless no context can leave the first chunk) and head_dim 64 / 128 / 256.
void check_dual_chunk_attention(const ModelConfig& model, const EngineConfig& config) {
  const DualChunkAttention& dca = model.dual_chunk_attention;
  if (!dca.enabled()) return;
  NANOVLLM_CHECK(config.sparse.make_custom || find_decode_policy(config.sparse.policy).dual_chunk_attention,
                 "--sparse-policy ", config.sparse.policy, " does not run with Dual Chunk Attention (the model's ",
                 "dual_chunk_attention_config); use --sparse-policy quest or full");
  NANOVLLM_CHECK(!config.sparse_prefill.enabled() || dca.chunk_len() % config.sparse_prefill.block_size == 0,
                 "--sparse-prefill-block-size ", config.sparse_prefill.block_size, " must divide Dual Chunk ",
                 "Attention's chunk length chunk_size - local_size = ", dca.chunk_len(),
                 " (the model's dual_chunk_attention_config)");
  if (config.model.backend != Backend::kCuda || config.model.max_model_len <= dca.chunk_len()) return;
  NANOVLLM_CHECK(dca.chunk_len() % ops::kCudaDualChunkLenMultiple == 0, "dual_chunk_attention_config: chunk_size - "
                 "local_size = ", dca.chunk_len(), " must be a multiple of ", ops::kCudaDualChunkLenMultiple,
                 " on the cuda backend (or --max-model-len at most ", dca.chunk_len(), ")");
  NANOVLLM_CHECK(ops::cuda_dual_chunk_head_dim(model.head_dim), "Dual Chunk Attention on the cuda backend needs "
                 "head_dim 64, 128 or 256 (the model has ", model.head_dim, ")");
}

// An fp8 KV cache (docs/kv_cache.md) runs on every path but Dual Chunk Attention's, whose kernels read only a cache
// of the activation dtype.
void check_kv_cache_dtype(const ModelConfig& model, const EngineConfig& config) {
  if (!config.cache.kv_cache_fp8()) return;
  NANOVLLM_CHECK(!model.dual_chunk_attention.enabled(), "--kv-cache-dtype ", config.cache.kv_cache_dtype,
                 " does not run with Dual Chunk Attention (the model's dual_chunk_attention_config); use "
                 "--kv-cache-dtype auto");
}

}  // namespace

ModelConfig LLMEngine::prepare(EngineConfig& config) {
  ModelConfig model_config = ModelConfig::from_model_dir(config.model.path);
  // Like vLLM, also stop at tokenizer_config.json's eos_token (chat models: <|im_end|>) when
  // generation_config.json does not list it. Before the runner: its sampler enforces min_tokens on these.
  if (const std::optional<int32_t> eos = tokenizer_eos_token_id(config.model.path, model_config.vocab_size)) {
    auto& ids = model_config.eos_token_ids;
    if (std::find(ids.begin(), ids.end(), *eos) == ids.end()) ids.push_back(*eos);
  }
  // The model's own limits on the split first (they name heads / sizes), then the config's checks.
  validate_tensor_parallel(model_config, config.parallel.tensor_parallel_size);
  config.resolve(model_config.max_model_len());
  check_dual_chunk_attention(model_config, config);
  check_kv_cache_dtype(model_config, config);
  return model_config;
}

void LLMEngine::run_worker(EngineConfig config) {
  const ModelConfig model_config = prepare(config);
  run_tensor_parallel_worker(config, model_config);
}

LLMEngine::LLMEngine(EngineConfig config) : config_(std::move(config)) {
  model_config_ = prepare(config_);
  NANOVLLM_CHECK(config_.parallel.node_rank == 0, "node_rank ", config_.parallel.node_rank,
                 " runs `nanovllm worker` (no engine); the engine runs on node 0");
  runner_ = ModelRunner::create(config_, model_config_);
  config_.cache.num_kv_blocks = runner_->num_kv_blocks();
  scheduler_ = std::make_unique<Scheduler>(config_, model_config_.eos_token_ids);
  if (config_.offload.enabled)
    offload_scheduler_ = std::make_unique<Scheduler>(offload_lane_config(config_), model_config_.eos_token_ids);
}

LLMEngine::~LLMEngine() = default;

bool LLMEngine::is_offloaded(int64_t prompt_len, const SamplingParams& params) const {
  if (!offload_scheduler_) return false;
  const int64_t reach = params.reach(prompt_len, config_.model.max_model_len);
  if (config_.offload.min_tokens > 0 && reach >= config_.offload.min_tokens) return true;
  return config_.cache.blocks_for(reach) > runner_->num_kv_blocks();  // does not fit the GPU cache
}

void LLMEngine::validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  params.validate(model_config_.vocab_size);
  if (params.structured_outputs) structured_outputs().compile(*params.structured_outputs);
  NANOVLLM_CHECK(!prompt.empty(), "the prompt is empty");
  const int64_t n = static_cast<int64_t>(prompt.size());
  NANOVLLM_CHECK(n < config_.model.max_model_len, "the prompt has ", n, " tokens; max_model_len is ",
                 config_.model.max_model_len, " (prompt plus at least one generated token)");
  for (int32_t id : prompt)
    NANOVLLM_CHECK(id >= 0 && id < model_config_.vocab_size, "prompt token id ", id, " is outside the vocabulary [0, ",
                   model_config_.vocab_size, ")");
  if (is_offloaded(n, params))
    runner_->check_offload_memory(params.reach(n, config_.model.max_model_len));
}

int64_t LLMEngine::add_request(std::vector<int32_t> prompt_token_ids, const SamplingParams& params) {
  validate_request(prompt_token_ids, params);
  auto seq = std::make_unique<Sequence>();
  seq->num_prompt_tokens = static_cast<int64_t>(prompt_token_ids.size());
  seq->token_ids = std::move(prompt_token_ids);
  return add_sequence(std::move(seq), params);
}

int64_t LLMEngine::add_request(std::shared_ptr<const std::vector<int32_t>> prompt, const SamplingParams& params) {
  NANOVLLM_CHECK(prompt != nullptr, "add_request: no prompt");
  validate_request(*prompt, params);
  auto seq = std::make_unique<Sequence>();
  seq->num_prompt_tokens = static_cast<int64_t>(prompt->size());
  seq->shared_prompt = std::move(prompt);
  return add_sequence(std::move(seq), params);
}

int64_t LLMEngine::add_sequence(std::unique_ptr<Sequence> seq, const SamplingParams& params) {
  seq->seq_id = next_request_id_;
  seq->params = params;
  seq->cache_salt = static_cast<uint64_t>(model_config_.dual_chunk_attention.prefix_cache_salt(seq->num_prompt_tokens));
  if (params.structured_outputs) seq->constraint = structured_outputs().make_constraint(*params.structured_outputs);
  seq->arrival_time = std::chrono::steady_clock::now();
  // Scheduler::add validates lengths; throws before anything is queued.
  if (is_offloaded(seq->num_prompt_tokens, params)) {
    offload_scheduler_->add(std::move(seq));
  } else {
    scheduler_->add(std::move(seq));
  }
  return next_request_id_++;
}

void LLMEngine::abort_request(int64_t request_id) {
  if (!scheduler_->abort(request_id) && offload_scheduler_) offload_scheduler_->abort(request_id);
}

bool LLMEngine::has_unfinished() const {
  return scheduler_->has_unfinished() || (offload_scheduler_ && offload_scheduler_->has_unfinished());
}

LLMEngine::LoadStats LLMEngine::load_stats() const {
  const BlockManager& blocks = scheduler_->block_manager();
  LoadStats s{scheduler_->num_waiting(), scheduler_->num_running(), blocks.num_blocks(), blocks.num_used_blocks()};
  if (offload_scheduler_) {  // offloaded requests count as requests; their KV lives in the host pool
    s.num_waiting += offload_scheduler_->num_waiting();
    s.num_running += offload_scheduler_->num_running();
  }
  return s;
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<SampledToken> sampled = run_step(*scheduler_, false);
  if (offload_scheduler_) {
    std::vector<SampledToken> more = run_step(*offload_scheduler_, true);
    sampled.insert(sampled.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  std::vector<RequestOutput> finished;
  for (std::unique_ptr<Sequence>& seq : scheduler_->take_finished()) finished.push_back(make_output(*seq));
  if (offload_scheduler_)
    for (std::unique_ptr<Sequence>& seq : offload_scheduler_->take_finished()) finished.push_back(make_output(*seq));
  if (delta_callback_) emit_deltas(sampled, finished);
  return finished;
}

// One schedule -> run -> update round of one lane (the paged GPU cache, or the offloaded sequence).
std::vector<SampledToken> LLMEngine::run_step(Scheduler& scheduler, bool offloaded) {
  using Clock = std::chrono::steady_clock;
  if (!offloaded && launched_) {
    drop_finished(*launched_);
    if (!launched_->empty()) return finish_launched_step(false);
    runner_->wait_oldest();  // a step whose every sequence stopped before it: long done by now
    launched_.reset();
  }
  const auto t0 = Clock::now();
  const SchedulerOutput out = scheduler.schedule();
  std::vector<SampledToken> sampled;
  if (!out.empty()) {
    bool has_prefill = false;
    for (const ScheduledSequence& s : out.seqs) {
      if (s.seq->num_computed_tokens < s.seq->num_prompt_tokens) num_prompt_tokens_computed_ += s.num_new_tokens;
      has_prefill |= s.num_new_tokens > 1 || !s.sample;
    }
    const auto t1 = Clock::now();
    step_stats_.schedule_s += std::chrono::duration<double>(t1 - t0).count();
    if (!offloaded && config_.scheduler.async_scheduling && runner_->can_launch(out)) {
      runner_->launch(out, false);
      launched_ = out;
      return finish_launched_step(has_prefill);
    }
    sampled = offloaded ? runner_->execute_offloaded(out) : runner_->execute(out);
    const auto t2 = Clock::now();
    num_generated_tokens_ += static_cast<int64_t>(sampled.size());
    scheduler.update(out, sampled);
    const double run_s = std::chrono::duration<double>(t2 - t1).count();
    (has_prefill ? step_stats_.prefill_steps_s : step_stats_.decode_steps_s) += run_s;
    ++(has_prefill ? step_stats_.prefill_steps : step_stats_.decode_steps);
    step_stats_.schedule_s += std::chrono::duration<double>(Clock::now() - t2).count();
  }
  return sampled;
}

// Removes the sequences that finished (aborted, or stopped at the step before) from a launched step:
// their rows still run and their tokens are dropped. Their blocks may already be free: the rows'
// K/V stores land before any later step, which is the only place a new owner could use them.
void LLMEngine::drop_finished(SchedulerOutput& out) const {
  std::erase_if(out.seqs, [](const ScheduledSequence& s) { return s.seq->is_finished(); });
}

// Step N (launched_) is on the device. If step N + 1 can be scheduled without N's tokens, schedule
// and launch it first, fed on the device with N's tokens; then wait for N and apply its tokens.
std::vector<SampledToken> LLMEngine::finish_launched_step(bool has_prefill) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  SchedulerOutput cur = std::move(*launched_);
  launched_.reset();
  int outstanding = 1;  // launched steps not yet waited for
  bool advanced = false, resolved = false;
  try {
    drop_finished(cur);
    const bool offload_idle = !offload_scheduler_ || !offload_scheduler_->has_unfinished();
    if (!cur.empty() && offload_idle && scheduler_->can_schedule_ahead(cur)) {
      scheduler_->advance(cur);
      advanced = true;
      SchedulerOutput next = scheduler_->schedule();
      NANOVLLM_ASSERT(next.seqs.size() == cur.seqs.size(), "scheduling ahead changed the batch");
      NANOVLLM_CHECK(runner_->can_launch(next), "the runner cannot launch a step scheduled ahead");
      runner_->launch(next, true);
      ++outstanding;
      ++step_stats_.scheduled_ahead_steps;
      launched_ = std::move(next);
    }
    std::vector<SampledToken> sampled = runner_->wait_oldest();
    --outstanding;
    // Tokens of the rows dropped above go; the rest are in cur's order.
    std::unordered_set<int64_t> kept;
    for (const ScheduledSequence& s : cur.seqs) kept.insert(s.seq->seq_id);
    std::erase_if(sampled, [&](const SampledToken& t) { return !kept.contains(t.seq_id); });
    if (!advanced) {
      scheduler_->advance(cur);
      advanced = true;
    }
    scheduler_->resolve(cur, sampled);
    resolved = true;
    num_generated_tokens_ += static_cast<int64_t>(sampled.size());
    // Sequences that stopped at N lose their row of N + 1. If none is left (all stopped at an EOS or
    // stop id), N + 1 stays outstanding rather than delaying N's outputs: the next step() drops it.
    if (launched_) drop_finished(*launched_);
    (has_prefill ? step_stats_.prefill_steps_s : step_stats_.decode_steps_s) +=
        std::chrono::duration<double>(Clock::now() - t0).count();
    ++(has_prefill ? step_stats_.prefill_steps : step_stats_.decode_steps);
    return sampled;
  } catch (...) {
    // Leave no step behind on the runner and no placeholder in a sequence (step N counts as not run);
    // the caller aborts the requests of the failed step.
    launched_.reset();
    if (advanced && !resolved)
      for (const ScheduledSequence& s : cur.seqs) {
        s.seq->num_computed_tokens -= s.num_new_tokens;
        if (s.sample && s.seq->token_ids.back() == kPendingToken) s.seq->token_ids.pop_back();
      }
    for (; outstanding > 0; --outstanding) {
      try {
        runner_->wait_oldest();
      } catch (...) {
      }
    }
    throw;
  }
}

void LLMEngine::emit_deltas(const std::vector<SampledToken>& sampled, const std::vector<RequestOutput>& finished) const {
  std::unordered_map<int64_t, const RequestOutput*> done;
  for (const RequestOutput& o : finished) done.emplace(o.request_id, &o);
  for (const SampledToken& t : sampled) {
    RequestDelta d;
    d.request_id = t.seq_id;
    d.new_token_ids.push_back(t.token_id);
    if (!t.top_logprobs.empty()) d.logprobs.push_back(t.top_logprobs);
    if (auto it = done.find(t.seq_id); it != done.end()) {
      d.finished = true;
      d.finish_reason = it->second->finish_reason;
      done.erase(it);
    }
    delta_callback_(d);
  }
  for (const RequestOutput& o : finished) {  // finished without a token this step (aborted), in order
    if (!done.contains(o.request_id)) continue;
    RequestDelta d;
    d.request_id = o.request_id;
    d.finished = true;
    d.finish_reason = o.finish_reason;
    delta_callback_(d);
  }
}

}  // namespace nanovllm
