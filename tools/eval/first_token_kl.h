// How close one eval run's next-token distributions are to a reference run's: each sample's first generated
// token's top-K logprob list is saved in --json-out, and a later run (another engine configuration on the
// same seeded prompts) compares its lists with the reference's sample by sample (kl.h's lower bound).
// Samples are matched by their place in the score table: (row, context length, sample index), where the
// row is the task (ruler) or the needle depth (needle); a 64-bit FNV-1a hash of the prompt's token ids
// checks that the matched prompts really are the same.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/engine/sequence.h"

namespace nanovllm::eval {

// The engine's limit on top-K logprobs (SamplingParams::validate: vLLM's default max_logprobs; the GPU
// sampler returns at most that many).
constexpr int64_t kMaxFirstTokenLogprobs = 20;

struct SampleKey {
  std::string row;  // the score table's row: the task (ruler) or the needle depth label (needle)
  int64_t context = 0;
  int64_t index = 0;
  auto operator<=>(const SampleKey&) const = default;
};
std::string to_string(const SampleKey& key);  // "niah_single_2 at 4096 #3"

struct FirstToken {
  SampleKey key;
  uint64_t prompt_fingerprint = 0;
  std::vector<TokenLogprob> logprobs;  // the first generated token's top-K list
};

// 64-bit FNV-1a over the ids' little-endian bytes: cheap, and any changed token changes it (almost surely).
uint64_t prompt_fingerprint(const std::vector<int32_t>& prompt_ids);

// {"row", "prompt_fingerprint" (16 hex digits: JSON numbers lose 64-bit precision in many readers),
//  "ids", "logprobs"}: what --json-out stores under each sample's "first_token".
nlohmann::ordered_json first_token_json(const FirstToken& t);

// The first tokens of a --json-out file written with --first-token-logprobs.
struct FirstTokenReference {
  std::string path;
  std::string command;  // "ruler" or "needle"
  int64_t k = 0;        // its --first-token-logprobs
  std::map<SampleKey, FirstToken> samples;
};
// nanovllm::Error naming the file when it cannot be read or parsed, or has no first-token logprobs.
FirstTokenReference load_first_token_reference(const std::string& path);

struct KlStats {
  int64_t samples = 0, top1_agree = 0;
  double sum = 0, max = 0;
  void add(double kl, bool same_top);
  double mean() const { return samples > 0 ? sum / static_cast<double>(samples) : 0.0; }
  double top1_agreement() const {
    return samples > 0 ? static_cast<double>(top1_agree) / static_cast<double>(samples) : 0.0;
  }
};

struct FirstTokenKl {
  std::string reference_path;
  int64_t k = 0, reference_k = 0;
  std::vector<int64_t> contexts;  // the run's, in order
  std::vector<KlStats> by_context;
  KlStats overall;
  int64_t unmatched = 0;  // this run's samples the reference does not have

  // A table: per context length and overall, samples, mean and max KL, top-1 agreement.
  std::string format() const;
  // {"reference", "K", "reference_K", "contexts": {context: stats}, "overall": stats, "unmatched"}, stats being
  // {"mean", "max", "samples", "top1_agreement"}.
  nlohmann::ordered_json to_json() const;
};

// nanovllm::Error when the commands differ, no sample of `run` is in the reference, or a matched sample's
// prompt differs. Needs only the keys and fingerprints: called before the run, so a mismatch costs nothing.
void check_reference_matches(const FirstTokenReference& reference, const std::string& command,
                             const std::vector<FirstToken>& run);

// KL(reference || run) per sample present in both (check_reference_matches first).
FirstTokenKl compare_first_tokens(const FirstTokenReference& reference, const std::string& command,
                                  const std::vector<FirstToken>& run, const std::vector<int64_t>& contexts,
                                  int64_t k);

}  // namespace nanovllm::eval
