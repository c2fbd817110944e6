// nanovllm bench grammar: the grammar engine's host costs over a real vocabulary (issue 50's targets):
// compiling a JSON Schema (schema -> grammar -> automaton), and the token mask per generated token, first
// while positions are met for the first time (their token split is computed then: "cold") and again on a
// fresh matcher of the same compiled grammar ("warm", what every later request of that schema pays). Tokens
// are drawn at random from each mask, so the walk covers the schema the way a weak model would.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <ctime>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "text_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/grammar/automaton.h"
#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/json_schema.h"
#include "nanovllm/grammar/matcher.h"
#include "nanovllm/llm/token_vocabulary.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::cli {
namespace {

// Thread CPU time: what the work costs, apart from time the thread waits for a core on a busy machine (the
// wall time is printed too).
struct Clock {
  using time_point = double;  // microseconds
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
  }
};
double us_since(double t) { return Clock::now() - t; }
double wall_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 20 properties of mixed types, 5 required: the issue's "typical schema".
std::string default_schema() {
  static const char* types[] = {R"({"type":"string"})", R"({"type":"integer"})", R"({"type":"number"})",
                                R"({"type":"boolean"})", R"({"type":"string","maxLength":16})",
                                R"({"enum":["red","green","blue"]})", R"({"type":"array","items":{"type":"integer"},"maxItems":4})"};
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; i < 20; ++i) s += std::string(i ? "," : "") + "\"field_" + std::to_string(i) + "\":" + types[i % 7];
  return s + R"(},"required":["field_0","field_1","field_2","field_3","field_4"],"additionalProperties":false})";
}

struct Stats {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  int64_t n = 0;
};
Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = static_cast<int64_t>(v.size());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  s.max = v.back();
  return s;
}

// One generation of up to max_tokens random allowed tokens; returns the mask time of each step (us).
std::vector<double> walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, int64_t max_tokens, uint32_t seed,
                         bool& completed) {
  grammar::GrammarMatcher m(g);
  const int64_t vocab = g->vocab().vocab_size();
  std::vector<uint32_t> words(static_cast<size_t>(grammar::bitmask_words(vocab)));
  std::vector<int32_t> allowed;
  std::mt19937 rng(seed);
  std::vector<double> times;
  for (int64_t step = 0; step < max_tokens && !m.is_completed(); ++step) {
    const double t = wall_us();  // a thread-CPU clock read is a system call: too coarse here
    m.fill_next_token_bitmask(words.data());
    times.push_back(wall_us() - t);
    allowed.clear();
    for (int64_t id = 0; id < vocab; ++id)
      if (grammar::bitmask_test(words.data(), id)) allowed.push_back(static_cast<int32_t>(id));
    NANOVLLM_CHECK(!allowed.empty(), "bench grammar: an empty mask before the answer was complete");
    const int32_t pick = allowed[rng() % allowed.size()];
    NANOVLLM_CHECK(m.accept_token(pick), "bench grammar: the matcher refused a token of its own mask");
  }
  completed = m.is_completed();
  return times;
}

}  // namespace

void register_bench_grammar(CLI::App& bench) {
  struct Options {
    std::string model, schema;
    int64_t max_tokens = 400;
    int walks = 8;
    int repeats = 20;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand("grammar", "structured outputs: JSON Schema compile time and token mask time "
                                                  "per token over a tokenizer's vocabulary");
  cmd->add_option("--model", opt->model, "model (or tokenizer) directory with tokenizer.json")->required();
  cmd->add_option("--schema", opt->schema, "a JSON Schema file (default: 20 properties of mixed types)");
  cmd->add_option("--max-tokens", opt->max_tokens, "tokens per walk at most")->check(at_least(1))->capture_default_str();
  cmd->add_option("--walks", opt->walks, "random generations measured")->check(at_least(1))->capture_default_str();
  cmd->add_option("--repeats", opt->repeats, "compilations timed (the median is reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    const Tokenizer tok = Tokenizer::from_model_dir(opt->model);
    std::vector<int64_t> stops;
    if (const std::optional<int32_t> eos = tok.eos_token_id()) stops.push_back(*eos);
    const int64_t vocab_size = std::max<int64_t>(tok.vocab_size(), (tok.vocab_size() + 127) / 128 * 128);
    const auto vocab = make_token_vocabulary(tok, stops, vocab_size);
    const std::string schema = opt->schema.empty() ? default_schema() : read_text_file(opt->schema, "--schema");

    std::vector<double> to_grammar, to_automaton, compile_wall;
    std::shared_ptr<const grammar::CompiledGrammar> compiled;
    for (int r = 0; r < opt->repeats; ++r) {
      const double w = wall_us();
      auto t = Clock::now();
      const grammar::Grammar g = grammar::json_schema_grammar(std::string_view(schema));
      to_grammar.push_back(us_since(t));
      t = Clock::now();
      compiled = std::make_shared<const grammar::CompiledGrammar>(grammar::compile_grammar(g), vocab);
      to_automaton.push_back(us_since(t));
      compile_wall.push_back(wall_us() - w);
    }
    const Stats grammar_us = summarize(to_grammar), automaton_us = summarize(to_automaton);
    const Stats wall = summarize(compile_wall);

    std::vector<double> cold, warm;
    int completed = 0;
    for (int w = 0; w < opt->walks; ++w) {
      bool done = false;
      const std::vector<double> c = walk(compiled, opt->max_tokens, static_cast<uint32_t>(w), done);
      cold.insert(cold.end(), c.begin(), c.end());
      completed += done;
    }
    for (int w = 0; w < opt->walks; ++w) {  // the same walks again: every position's split is known now
      bool done = false;
      const std::vector<double> c = walk(compiled, opt->max_tokens, static_cast<uint32_t>(w), done);
      warm.insert(warm.end(), c.begin(), c.end());
    }
    const auto t = Clock::now();
    const auto fresh = std::make_shared<const grammar::CompiledGrammar>(compiled->tables(), vocab);
    const int64_t positions = fresh->precompute_all();
    const double precompute_ms = us_since(t) / 1000;
    const Stats c = summarize(cold), h = summarize(warm);
    if (opt->json) {
      auto stats = [](const Stats& s) {
        return nlohmann::json{{"mean_us", s.mean}, {"p50_us", s.p50}, {"p99_us", s.p99}, {"max_us", s.max}, {"n", s.n}};
      };
      nlohmann::json j = {{"vocab", vocab_size},
                          {"states", compiled->tables().num_states()},
                          {"positions", positions},
                          {"compile_ms", (grammar_us.p50 + automaton_us.p50) / 1000},
                          {"compile_wall_ms", wall.p50 / 1000},
                          {"schema_to_grammar_ms", grammar_us.p50 / 1000},
                          {"grammar_to_automaton_ms", automaton_us.p50 / 1000},
                          {"precompute_all_ms", precompute_ms},
                          {"mask_cold", stats(c)},
                          {"mask_warm", stats(h)},
                          {"walks_completed", completed},
                          {"walks", opt->walks}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("vocabulary: %lld tokens (logits width %lld); automaton: %d states, %lld positions\n",
                static_cast<long long>(vocab->sorted().size()), static_cast<long long>(vocab_size),
                compiled->tables().num_states(), static_cast<long long>(positions));
    std::printf("compile and split times are thread CPU time (a loaded machine's wall time is longer); masks: wall\n");
    std::printf("compile (median of %d): %.2f ms = schema -> grammar %.2f ms + grammar -> automaton %.2f ms "
                "(wall %.2f ms)\n",
                opt->repeats, (grammar_us.p50 + automaton_us.p50) / 1000, grammar_us.p50 / 1000, automaton_us.p50 / 1000,
                wall.p50 / 1000);
    std::printf("token split of every position at once: %.1f ms\n", precompute_ms);
    std::printf("mask per token, cold (%lld tokens): mean %.1f us, p50 %.1f, p99 %.1f, max %.1f\n",
                static_cast<long long>(c.n), c.mean, c.p50, c.p99, c.max);
    std::printf("mask per token, warm (%lld tokens): mean %.1f us, p50 %.1f, p99 %.1f, max %.1f\n",
                static_cast<long long>(h.n), h.mean, h.p50, h.p99, h.max);
    std::printf("%d of %d random walks completed the object within %lld tokens\n", completed, opt->walks,
                static_cast<long long>(opt->max_tokens));
  });
}

}  // namespace nanovllm::cli
