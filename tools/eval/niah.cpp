// Needle in a haystack (RULER's scripts/data/synthetic/niah.py): needles "One of the special magic
// {numbers} for {key} is: {value}." hidden in noise sentences, corpus text or distractor needles; the
// question asks for the values of one or more keys.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "eval/draft.h"
#include "eval/templates.h"
#include "eval/words.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

std::string random_number(Rng& rng) { return std::to_string(rng.range(1000000, 9999999)); }  // 7 digits

std::string random_word(Rng& rng) {
  return std::string(rng.choice(adjectives())) + "-" + std::string(rng.choice(nouns()));
}

// Python's str(uuid.UUID(int=random.getrandbits(128), version=4)): version and variant bits set.
std::string random_uuid(Rng& rng) {
  uint8_t b[16];
  for (int i = 0; i < 2; ++i) {
    const uint64_t x = rng.next();
    for (int j = 0; j < 8; ++j) b[i * 8 + j] = static_cast<uint8_t>(x >> (56 - 8 * j));
  }
  b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);
  char s[37];
  std::snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

std::string random_of(NeedleType t, Rng& rng) {
  switch (t) {
    case NeedleType::kWords: return random_word(rng);
    case NeedleType::kNumbers: return random_number(rng);
    case NeedleType::kUuids: return random_uuid(rng);
  }
  return {};
}

// RULER's needle depths for the essay haystack: round(linspace(0, 100, 40)).
std::vector<int> ruler_depths() {
  std::vector<int> d;
  for (int i = 0; i < 40; ++i) d.push_back(static_cast<int>(100.0 * i / 39.0 + 0.5));
  return d;
}

struct Needle {
  std::string text;
  double depth;  // fraction of the haystack before it
};

// `text` with sentences starting at `offsets` (the first 0): each needle goes before the sentence start
// nearest to depth * length in bytes (or at the very end for depth 1), joined with single spaces like
// RULER's " ".join of sentences and needles. RULER picks the sentence by index (int(n * depth)); by bytes,
// a needle sweep's depth is where the needle is in the context, however long the sentences.
std::string insert_at_sentences(const std::string& text, const std::vector<size_t>& offsets,
                                const std::vector<Needle>& needles) {
  std::string out;
  out.reserve(text.size() + needles.size() * 80);
  size_t cursor = 0;
  for (const Needle& needle : needles) {  // sorted by depth
    const double want = needle.depth * static_cast<double>(text.size());
    size_t k = 0;  // the sentence start nearest to `want`; offsets.size() is the end of the text
    double best = want;
    for (size_t i = 1; i <= offsets.size(); ++i) {
      const double at = i < offsets.size() ? static_cast<double>(offsets[i]) : static_cast<double>(text.size());
      if (std::abs(at - want) < best) best = std::abs(at - want), k = i;
    }
    if (k < offsets.size() && offsets[k] >= cursor) {
      out.append(text, cursor, offsets[k] - cursor);
      cursor = offsets[k];
      out += needle.text;
      out += ' ';
    } else {
      out.append(text, cursor);
      cursor = text.size();
      if (!out.empty()) out += ' ';
      out += needle.text;
    }
  }
  out.append(text, cursor);
  return out;
}

// `units` copies of a line (or distinct lines from `line(i)`) joined by "\n", needles as extra lines at
// floor((units + 1) * depth) (RULER inserts into its list of sentences at sampled indices).
template <class Line>
std::string insert_among_lines(int64_t units, const Line& line, const std::vector<Needle>& needles) {
  std::string out;
  size_t next = 0;
  auto emit = [&](const std::string& s) {
    if (!out.empty()) out += '\n';
    out += s;
  };
  for (int64_t i = 0; i <= units; ++i) {
    while (next < needles.size() &&
           std::min(units, static_cast<int64_t>(static_cast<double>(units + 1) * needles[next].depth)) == i)
      emit(needles[next++].text);
    if (i < units) emit(line(i));
  }
  return out;
}

}  // namespace

Draft make_niah(const TaskConfig& task, Rng& rng, const DraftInputs& in) {
  NANOVLLM_CHECK(task.num_queries <= task.num_keys, task.name, ": more queries than keys");
  const std::string type_v(to_string(task.value_type));

  // Keys (distinct) and their values; one needle per (key, value).
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;
  std::vector<std::string> needle_texts;
  std::vector<size_t> needle_key;  // which key each needle belongs to
  while (static_cast<int>(keys.size()) < task.num_keys) {
    std::string key = random_of(task.key_type, rng);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(std::move(key));
    values.emplace_back();
    for (int v = 0; v < task.num_values; ++v) {
      values.back().push_back(random_of(task.value_type, rng));
      needle_texts.push_back(templates::format(
          templates::kNiahNeedle, {{"type_needle_v", type_v}, {"key", keys.back()}, {"value", values.back().back()}}));
      needle_key.push_back(keys.size() - 1);
    }
  }
  std::vector<size_t> order(needle_texts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  rng.shuffle(order);  // RULER shuffles the needles before placing them

  // Depths: RULER's 40 essay depths without repetition, uniform positions among noise / needle lines,
  // or the one the caller fixed (needle sweep).
  std::vector<double> depths;
  if (in.depth) {
    depths.assign(order.size(), *in.depth);
  } else if (task.haystack == Haystack::kEssay) {
    const std::vector<int> all = ruler_depths();
    for (size_t i : rng.sample(all.size(), order.size())) depths.push_back(all[i] / 100.0);
  } else {
    for (size_t i = 0; i < order.size(); ++i) depths.push_back(rng.uniform());
  }
  std::sort(depths.begin(), depths.end());
  std::vector<Needle> needles;
  for (size_t i = 0; i < order.size(); ++i) needles.push_back({needle_texts[order[i]], depths[i]});

  // The question: num_queries of the keys; the answers are all their values.
  std::vector<std::string> queries;
  Draft d;
  for (size_t qi : rng.sample(keys.size(), static_cast<size_t>(task.num_queries))) {
    queries.push_back(keys[qi]);
    for (const std::string& v : values[qi]) d.answers.push_back(v);
  }
  std::string query = queries.back();
  if (queries.size() > 1) {  // "a, b, c, and d"
    query.clear();
    for (size_t i = 0; i + 1 < queries.size(); ++i) query += queries[i] + ", ";
    query += "and " + queries.back();
  }
  for (const Needle& n : needles)
    if (n.text.find(" is: " + d.answers.front() + ".") != std::string::npos) d.depth = n.depth;

  // RULER's singular wording when one value is asked for (these replacements, in this order, on the
  // whole template including the answer prefix).
  std::string tmpl(templates::kNiah), prefix(templates::kNiahAnswerPrefix), type_q = type_v;
  if (task.num_queries * task.num_values == 1) {
    for (std::string* s : {&tmpl, &prefix}) {
      *s = templates::replace_all(*s, "Some", "A");
      *s = templates::replace_all(*s, "are all", "is");
      *s = templates::replace_all(*s, "are", "is");
      *s = templates::replace_all(*s, "answers", "answer");
    }
    type_q.pop_back();  // "numbers" -> "number"
  }
  d.answer_prefix = templates::format(prefix, {{"type_needle_v", type_q}, {"query", query}});
  d.target = " ";
  for (size_t i = 0; i < d.answers.size(); ++i) d.target += (i ? ", " : "") + d.answers[i];
  d.target += ".";

  auto user_turn = [tmpl, type_q, query](const std::string& context) {
    return templates::format(tmpl, {{"type_needle_v", type_q}, {"context", context}, {"query", query}});
  };
  switch (task.haystack) {
    case Haystack::kNoise:
      d.render = [user_turn, needles](int64_t units) {
        const std::string noise(templates::kNoise);
        return user_turn(insert_among_lines(units, [&](int64_t) { return noise; }, needles));
      };
      break;
    case Haystack::kNeedle: {
      // Distractors drawn from their own stream: the first k are the same for any number of units.
      const uint64_t hay_seed = rng.next();
      const TaskConfig t = task;
      d.render = [user_turn, needles, hay_seed, t, type_v, keys](int64_t units) {
        Rng hay(hay_seed);
        std::vector<std::string> lines;
        lines.reserve(static_cast<size_t>(units));
        while (static_cast<int64_t>(lines.size()) < units) {
          std::string key = random_of(t.key_type, hay);
          std::string value = random_of(t.value_type, hay);
          if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;  // never a second answer
          lines.push_back(templates::format(templates::kNiahNeedle,
                                            {{"type_needle_v", type_v}, {"key", key}, {"value", value}}));
        }
        return user_turn(insert_among_lines(units, [&](int64_t i) { return lines[static_cast<size_t>(i)]; }, needles));
      };
      break;
    }
    case Haystack::kEssay: {
      // A random sentence of the corpus starts the haystack (RULER always starts at its first essay).
      const Corpus* corpus = &in.corpus;
      const auto& starts = corpus->sentence_starts();
      const int64_t start = starts[static_cast<size_t>(rng.below(starts.size()))];
      d.render = [user_turn, needles, corpus, start](int64_t units) {
        std::vector<size_t> offsets;
        const std::string text = corpus->words(start, units, &offsets);
        return user_turn(insert_at_sentences(text, offsets, needles));
      };
      break;
    }
  }
  return d;
}

}  // namespace nanovllm::eval
