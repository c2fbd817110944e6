// Frequent words extraction (RULER's freq_words_extraction.py): random 6-letter "coded" words with Zipf
// counts (word k appears floor(n / (zeta(2) k^2)) times), the most frequent being "..." (noise); the
// answer is the next three.
#include <set>

#include "eval/draft.h"
#include "eval/templates.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

constexpr double kZeta2 = 1.6449340668482264;  // pi^2 / 6
constexpr int kCodedWordLen = 6;

// Copies of word k (1-based) among n words. Exact IEEE arithmetic (one multiply, one divide), so the same
// on every machine; RULER computes n * k**-alpha / zeta(alpha) in floating point likewise.
int64_t zipf_count(int64_t n, int64_t k) {
  return static_cast<int64_t>(static_cast<double>(n) / (kZeta2 * static_cast<double>(k * k)));
}

}  // namespace

Draft make_freq_words(const TaskConfig& task, Rng& rng, const DraftInputs& in) {
  NANOVLLM_CHECK(task.alpha == 2, task.name, ": only alpha = 2 is implemented");
  // RULER: vocab_size = max_seq_length // 50 below 8K tokens, else 2000.
  const int64_t vocab_size = in.context < 8192 ? std::max<int64_t>(in.context / 50, 8) : 2000;
  std::vector<std::string> vocab;
  std::set<std::string> seen;
  while (static_cast<int64_t>(vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < kCodedWordLen; ++i) w.push_back(static_cast<char>('a' + rng.below(26)));
    if (seen.insert(w).second) vocab.push_back(std::move(w));
  }
  vocab[0] = "...";  // the most frequent "word" is noise

  Draft d;
  d.answers.assign(vocab.begin() + 1, vocab.begin() + 4);
  d.target = " " + d.answers[0] + " " + d.answers[1] + " " + d.answers[2];
  d.answer_prefix = std::string(templates::kFreqWordsAnswerPrefix);
  // At least two copies of the 4th word and fewer of the 5th, so the top three are well defined.
  d.min_units = 64;
  const uint64_t shuffle_seed = rng.next();
  d.render = [vocab, shuffle_seed](int64_t units) {
    std::vector<const std::string*> words;
    for (size_t k = 1; k <= vocab.size(); ++k) {
      const int64_t c = zipf_count(units, static_cast<int64_t>(k));
      if (c == 0) break;  // counts only fall with k
      for (int64_t r = 0; r < c; ++r) words.push_back(&vocab[k - 1]);
    }
    Rng shuffle(shuffle_seed);
    shuffle.shuffle(words);
    std::string context;
    for (size_t i = 0; i < words.size(); ++i) {
      if (i) context += ' ';
      context += *words[i];
    }
    return templates::format(templates::kFreqWords, {{"context", context}});
  };
  return d;
}

}  // namespace nanovllm::eval
