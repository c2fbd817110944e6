// Common words extraction (RULER's common_words_extraction.py): a numbered list where 10 words appear
// freq_common times and the rest freq_uncommon times; the answer is the 10 common words. An example list
// with its answer comes first. Words come from the haystack corpus's vocabulary (RULER: wonderwords).
#include <algorithm>

#include "eval/draft.h"
#include "eval/templates.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

// "1. w1 2. w2 ..." of `words`.
std::string numbered(const std::vector<const std::string*>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(i + 1) + ". " + *words[i];
  }
  return out;
}

// RULER's get_example: words[0, num_common) repeated freq_common times, the others freq_uncommon times,
// shuffled.
std::vector<const std::string*> word_list(const std::vector<const std::string*>& words, int num_common,
                                          int freq_common, int freq_uncommon, Rng& rng) {
  std::vector<const std::string*> list;
  for (size_t i = 0; i < words.size(); ++i) {
    const int reps = static_cast<int>(i) < num_common ? freq_common : freq_uncommon;
    for (int r = 0; r < reps; ++r) list.push_back(words[i]);
  }
  rng.shuffle(list);
  return list;
}

}  // namespace

Draft make_common_words(const TaskConfig& task, Rng& rng, const DraftInputs& in) {
  const std::vector<std::string>& vocab = in.corpus.vocabulary();
  // RULER's smaller setting below 4K tokens: a 20-word example (3 / 1) and frequencies 6 / 1. RULER counts
  // tokens of a BPE vocabulary (~4 per list entry); with fewer bytes per token the regular setting may not
  // fit 4K, and the builder asks for the compact one.
  const bool small = in.context < 4096 || in.compact;
  const int example_words = small ? 20 : 40;
  const int example_fc = small ? 3 : 10, example_fu = small ? 1 : 3;
  const int fc = small ? 6 : task.freq_common, fu = small ? 1 : task.freq_uncommon;
  NANOVLLM_CHECK(static_cast<int64_t>(vocab.size()) >= task.num_common + example_words + 1, task.name,
                 ": the haystack corpus has too few distinct words (", vocab.size(), ")");

  // One permutation of the vocabulary: the sample's words are its prefix (the first num_common the common
  // ones), the example's its tail, so both are disjoint and the prefix does not depend on the length.
  std::vector<const std::string*> perm;
  perm.reserve(vocab.size());
  for (const std::string& w : vocab) perm.push_back(&w);
  rng.shuffle(perm);
  const std::vector<const std::string*> example(perm.end() - example_words, perm.end());
  const std::vector<const std::string*> example_common(example.begin(), example.begin() + task.num_common);
  const std::string example_text =
      templates::format(templates::kCommonWords,
                        {{"context", numbered(word_list(example, task.num_common, example_fc, example_fu, rng))}}) +
      std::string(templates::kCommonWordsAnswerPrefix) + " " + numbered(example_common);

  Draft d;
  const std::vector<const std::string*> common(perm.begin(), perm.begin() + task.num_common);
  for (const std::string* w : common) d.answers.push_back(*w);
  d.target = " " + numbered(common);
  d.answer_prefix = std::string(templates::kCommonWordsAnswerPrefix);
  d.min_units = task.num_common;
  d.max_units = static_cast<int64_t>(perm.size()) - example_words;
  const uint64_t list_seed = rng.next();
  const int num_common = task.num_common;
  d.render = [perm, example_text, list_seed, num_common, fc, fu](int64_t units) {
    const std::vector<const std::string*> words(perm.begin(), perm.begin() + units);
    Rng list_rng(list_seed);
    return example_text + "\n" +
           templates::format(templates::kCommonWords, {{"context", numbered(word_list(words, num_common, fc, fu, list_rng))}});
  };
  return d;
}

}  // namespace nanovllm::eval
