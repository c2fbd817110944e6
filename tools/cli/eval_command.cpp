// nanovllm eval ruler | needle — long-context quality on seeded synthetic prompts (tools/eval/): RULER's
// tasks as a table of scores per task × context length, or the classic needle sweep (depth × length).
// Any engine configuration runs on identical prompts; --dump-prompts writes them (JSON lines) instead of
// running, for the trainer and the HF comparison.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_options.h"
#include "eval/corpus.h"
#include "eval/dump.h"
#include "eval/first_token_kl.h"
#include "eval/generate.h"
#include "eval/progress.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/config.h"
#include "nanovllm/runner/model_runner.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "option_checks.h"

namespace nanovllm::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct EvalOptions {
  EngineOptions engine;
  std::vector<int64_t> contexts{4096};
  int64_t samples = 16;
  uint64_t seed = 42;  // RULER's default random_seed
  std::string template_choice = "auto";
  int64_t max_new_tokens = 0;
  std::string haystack;
  std::string json_out;
  std::string dump_prompts;
  int threads = 0;
  bool skip_too_short = false;
  int64_t first_token_logprobs = 0;  // K: keep each sample's first-token top-K logprobs (0: off)
  std::string kl_reference;          // a --json-out file to compare the first-token distributions with
  // ruler
  std::string tasks = "all";
  // needle
  std::string needle_task = "niah_single_2";
  std::vector<double> depths{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
};

void add_common_options(CLI::App& cmd, EvalOptions& o) {
  add_engine_options(cmd, o.engine);
  cmd.add_option("--context", o.contexts, "context lengths in the model's tokens (prompt + generated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of the prompts (sample i of a task and length is the same everywhere)")
      ->capture_default_str();
  cmd.add_option("--template", o.template_choice,
                 "auto | chat | none: the model's chat template around the task (auto: when it has one)")
      ->capture_default_str();
  cmd.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate per prompt (default: RULER's per task)");
  cmd.add_option("--haystack", o.haystack, "haystack text file (default: the built-in KJV text)");
  cmd.add_option("--json-out", o.json_out, "write scores, settings and every sample's output as JSON");
  cmd.add_option("--dump-prompts", o.dump_prompts,
                 "write the prompts as JSON lines ('-': stdout) and exit without running the model "
                 "(needs only the model directory's tokenizer)");
  cmd.add_option("--threads", o.threads, "threads building prompts (default: all cores)");
  cmd.add_flag("--skip-too-short", o.skip_too_short,
               "leave out samples whose shortest prompt does not fit their context, instead of failing");
  cmd.add_option("--first-token-logprobs", o.first_token_logprobs,
                 "K: save each sample's first generated token's top-K logprobs in --json-out (for --kl-reference)")
      ->check(in_range(1, static_cast<double>(eval::kMaxFirstTokenLogprobs)));
  cmd.add_option("--kl-reference", o.kl_reference,
                 "a --json-out file of an earlier run with --first-token-logprobs: print KL(reference || this run) "
                 "of the first-token distributions (a lower bound from the top-K lists) and the top-1 agreement");
}

// The longest context the engine will take: --max-model-len, else the model's own limit. Unknown (0) for
// a directory without config.json (a dump needs only the tokenizer).
int64_t context_limit(const EvalOptions& o) {
  const std::filesystem::path dir(o.engine.model);
  const int64_t max_model_len = o.engine.to_config().model.max_model_len;
  if (!std::filesystem::is_regular_file(dir / "config.json")) {
    NANOVLLM_CHECK(!o.dump_prompts.empty(), o.engine.model, ": no config.json in the model directory");
    return max_model_len;
  }
  const int64_t model_limit = ModelConfig::from_model_dir(dir).max_model_len();
  NANOVLLM_CHECK(max_model_len <= model_limit, "--max-model-len ", max_model_len, " is longer than the model's limit ",
                 model_limit);
  return max_model_len > 0 ? max_model_len : model_limit;
}

void check_inputs(const EvalOptions& o) {
  const std::filesystem::path dir(o.engine.model);
  NANOVLLM_CHECK(std::filesystem::is_directory(dir), o.engine.model, ": not a model directory");
  NANOVLLM_CHECK(std::filesystem::is_regular_file(dir / "tokenizer.json"), o.engine.model,
                 ": no tokenizer.json in the model directory; eval's tasks are text and need the model's tokenizer");
  NANOVLLM_CHECK(!o.contexts.empty(), "--context: give at least one length");
  NANOVLLM_CHECK(o.samples >= 1, "--samples must be >= 1, got ", o.samples);
  NANOVLLM_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  NANOVLLM_CHECK(o.kl_reference.empty() || o.first_token_logprobs > 0,
                 "--kl-reference needs --first-token-logprobs K (this run's lists to compare)");
  const int64_t limit = context_limit(o);
  for (int64_t c : o.contexts) {
    NANOVLLM_CHECK(c >= 64, "--context ", c, " is too short (at least 64 tokens)");
    NANOVLLM_CHECK(limit <= 0 || c <= limit, "--context ", c, " is longer than max_model_len ", limit,
                   o.engine.to_config().model.max_model_len > 0 ? " (--max-model-len)"
                                                                 : " (the model's limit; see config.json)");
  }
}

// Builds the prompts; with --dump-prompts writes them and returns nothing.
std::vector<eval::Sample> build_samples(const EvalOptions& o, const std::vector<eval::SampleRequest>& requests,
                                        const Tokenizer& tok, const eval::PromptFormat& format) {
  const std::unique_ptr<eval::Corpus> own_corpus =
      o.haystack.empty() ? nullptr : std::make_unique<eval::Corpus>(eval::Corpus::from_file(o.haystack));
  const eval::Corpus& corpus = own_corpus ? *own_corpus : eval::Corpus::builtin();
  const bool dump = !o.dump_prompts.empty();
  const eval::SampleBuilder builder(tok, format, corpus, o.seed, o.max_new_tokens, /*keep_text=*/dump);

  std::vector<eval::Sample> samples;
  std::ofstream file;
  std::ostream* out = nullptr;
  if (dump) {
    if (o.dump_prompts == "-") {
      out = &std::cout;
    } else {
      file.open(o.dump_prompts, std::ios::binary);
      NANOVLLM_CHECK(file.good(), "cannot write --dump-prompts file ", o.dump_prompts);
      out = &file;
    }
  }
  std::map<std::pair<std::string, int64_t>, int64_t> skipped;  // (task, context) -> samples left out
  std::function<void(const eval::SampleRequest&)> on_skip;
  if (o.skip_too_short) on_skip = [&](const eval::SampleRequest& r) { ++skipped[{r.task->name, r.context}]; };
  size_t done = 0, seen = 0;
  {
    eval::ProgressBar bar("prompts", requests.size());
    eval::generate_samples(
        builder, requests, o.threads,
        [&](eval::Sample&& s) {
          if (out) eval::write_sample_jsonl(*out, s, tok);
          else samples.push_back(std::move(s));
          ++done;
          bar.update(++seen);
        },
        on_skip ? [&](const eval::SampleRequest& r) { on_skip(r), bar.update(++seen); } : on_skip);
  }
  for (const auto& [key, n] : skipped)
    std::fprintf(stderr, "skipped %lld samples of %s at %lld: the context is too short for them\n",
                 static_cast<long long>(n), key.first.c_str(), static_cast<long long>(key.second));
  if (out) {
    out->flush();
    NANOVLLM_CHECK(out->good(), "writing --dump-prompts ", o.dump_prompts, " failed");
    std::fprintf(stderr, "wrote %zu prompts to %s\n", done, o.dump_prompts.c_str());
  }
  return samples;
}

// Each sample's key (its place in the score table) and prompt fingerprint; the logprobs come after the run.
std::vector<eval::FirstToken> first_token_keys(const std::vector<eval::Sample>& samples,
                                               const std::function<std::string(const eval::Sample&)>& row_of) {
  std::vector<eval::FirstToken> out;
  for (const eval::Sample& s : samples)
    out.push_back({{row_of(s), s.context, s.index}, eval::prompt_fingerprint(s.prompt_ids), {}});
  return out;
}

// Runs the samples, prints the table, writes --json-out. `row_of(sample)` is its table row.
void run_and_report(const EvalOptions& o, const std::string& command, const std::vector<std::string>& rows,
                    const std::string& row_header, const std::function<std::string(const eval::Sample&)>& row_of,
                    const std::vector<eval::SampleRequest>& requests) {
  check_inputs(o);
  const Tokenizer tok = Tokenizer::from_model_dir(o.engine.model);
  const eval::PromptFormat format = eval::resolve_format(o.template_choice, o.engine.model);
  const auto t_gen = Clock::now();
  std::vector<eval::Sample> samples = build_samples(o, requests, tok, format);
  const double gen_s = seconds_since(t_gen);
  if (!o.dump_prompts.empty()) {
    std::fprintf(stderr, "prompts built in %.1f s\n", gen_s);
    return;
  }
  std::vector<eval::FirstToken> firsts;
  if (o.first_token_logprobs > 0) firsts = first_token_keys(samples, row_of);
  // Read and matched before the run, so a bad reference fails in seconds, not after it.
  const std::optional<eval::FirstTokenReference> reference =
      o.kl_reference.empty() ? std::nullopt : std::optional(eval::load_first_token_reference(o.kl_reference));
  if (reference) eval::check_reference_matches(*reference, command, firsts);

  EngineConfig config = o.engine.to_config();
  config.sparse_prefill.count_blocks = true;  // the density line below, on a GPU too
  LLMEngine engine(config);
  const auto t_run = Clock::now();
  std::vector<eval::SampleResult> results;
  {
    eval::ProgressBar bar(command, samples.size());
    results = eval::run_samples(engine, samples, [&](size_t done) { bar.update(done); }, o.first_token_logprobs);
  }
  const double run_s = seconds_since(t_run);

  eval::ScoreTable table(rows, o.contexts);
  int64_t prompt_tokens = 0, generated = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    table.add(row_of(samples[i]), samples[i].context, results[i].score, static_cast<int64_t>(samples[i].prompt_ids.size()));
    prompt_tokens += static_cast<int64_t>(samples[i].prompt_ids.size());
    generated += static_cast<int64_t>(results[i].output_ids.size());
  }
  const EngineConfig& cfg = engine.config();
  std::printf("%s: %s, backend %s%s, template %s, seed %llu, %lld samples per cell\n", command.c_str(),
              o.engine.model.c_str(), to_string(cfg.model.backend), cfg.offload.enabled ? ", cpu offload" : "",
              format.name.c_str(), static_cast<unsigned long long>(o.seed), static_cast<long long>(o.samples));
  std::printf("%s", table.format(row_header).c_str());
  std::printf("overall %.2f | prompts %.1f s, run %.1f s (%lld prompt tokens, %lld generated)\n", table.overall_mean(),
              gen_s, run_s, static_cast<long long>(prompt_tokens), static_cast<long long>(generated));
  // Sparse prefill: the share of the causal key blocks its patterns listed (1 when no chunk went sparse).
  const std::optional<SparsePrefillCounters> sp = engine.runner_stats().sparse_prefill;
  const double density = sp ? sp->density() : 1.0;
  if (sp)
    std::printf("sparse prefill %s: %.1f%% of the causal key blocks attended (%lld layer-chunks sparse, %lld dense)\n",
                sparse_prefill_policy_name(cfg.sparse_prefill.policy), 100 * density,
                static_cast<long long>(sp->sparse_layer_chunks), static_cast<long long>(sp->dense_layer_chunks));
  // Mixed steps (decodes beside another prompt's prefill chunk) attend densely: with several prompts in flight
  // most decode tokens can escape the decode policy, and the score then says little about it.
  if (cfg.sparse.enabled() && cfg.scheduler.max_num_seqs > 1)
    std::printf("note: sparse decode runs only in steps without a prefill chunk; --max-num-seqs 1 measures the "
                "decode policy alone\n");
  for (size_t i = 0; i < firsts.size(); ++i) firsts[i].logprobs = results[i].first_token_logprobs;
  std::optional<eval::FirstTokenKl> kl;
  if (reference) {
    kl = eval::compare_first_tokens(*reference, command, firsts, o.contexts, o.first_token_logprobs);
    std::printf("%s", kl->format().c_str());
  }

  if (!o.json_out.empty()) {
    nlohmann::ordered_json j;
    j["command"] = command;
    j["model"] = o.engine.model;
    j["backend"] = to_string(cfg.model.backend);
    j["cpu_offload"] = cfg.offload.enabled;
    j["offload_min_tokens"] = cfg.offload.min_tokens;
    j["max_model_len"] = cfg.model.max_model_len;
    j["template"] = format.name;
    j["seed"] = o.seed;
    j["samples_per_cell"] = o.samples;
    j["contexts"] = o.contexts;
    j["rows"] = rows;
    j["sparse_prefill_policy"] = sparse_prefill_policy_name(cfg.sparse_prefill.policy);
    j["sparse_prefill_threshold"] = cfg.sparse_prefill.enabled() ? cfg.sparse_prefill.effective_threshold() : 1.0;
    j["sparse_prefill_density"] = density;
    const nlohmann::ordered_json scores = table.to_json(row_header);
    for (const auto& [k, v] : scores.items()) j[k] = v;
    j["time_s"] = {{"prompts", gen_s}, {"run", run_s}};
    j["first_token_logprobs"] = o.first_token_logprobs;
    if (kl) j["first_token_kl"] = kl->to_json();
    j["samples"] = eval::results_json(samples, results);
    for (size_t i = 0; i < firsts.size(); ++i) j["samples"][i]["first_token"] = eval::first_token_json(firsts[i]);
    std::ofstream f(o.json_out);
    f << j.dump(1) << "\n";
    NANOVLLM_CHECK(f.good(), "cannot write --json-out file ", o.json_out);
  }
}

std::string depth_label(double depth_percent) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", depth_percent);
  return buf;
}

}  // namespace

void register_eval(CLI::App& app) {
  CLI::App* eval_cmd = app.add_subcommand("eval", "long-context quality: RULER tasks, needle-in-a-haystack sweep");
  eval_cmd->require_subcommand(1);

  auto ruler = std::make_shared<EvalOptions>();
  CLI::App* r = eval_cmd->add_subcommand("ruler", "RULER's synthetic tasks: a score per task and context length");
  add_common_options(*r, *ruler);
  r->add_option("--tasks", ruler->tasks,
                "comma-separated: niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, "
                "cwe, fwe; 'niah' or 'all'")
      ->capture_default_str();
  r->add_option("--samples", ruler->samples, "samples per task and length")->capture_default_str();
  r->callback([ruler] {
    const std::vector<eval::TaskConfig> tasks = eval::parse_task_list(ruler->tasks);
    std::vector<std::string> rows;
    for (const eval::TaskConfig& t : tasks) rows.push_back(t.name);
    run_and_report(*ruler, "ruler", rows, "task", [](const eval::Sample& s) { return s.task; },
                   eval::ruler_requests(tasks, ruler->contexts, ruler->samples));
  });

  auto needle = std::make_shared<EvalOptions>();
  needle->samples = 4;
  CLI::App* n = eval_cmd->add_subcommand("needle", "needle-in-a-haystack sweep: a score per depth and context length");
  add_common_options(*n, *needle);
  n->add_option("--task", needle->needle_task, "a single-needle task: niah_single_1 (noise), _2 (text), _3 (uuid)")
      ->capture_default_str();
  n->add_option("--depths", needle->depths, "needle depths in percent of the haystack")->delimiter(',');
  n->add_option("--samples", needle->samples, "samples per depth and length")->capture_default_str();
  n->callback([needle] {
    const eval::TaskConfig& task = eval::find_task(needle->needle_task);
    NANOVLLM_CHECK(task.kind == eval::TaskKind::kNiah && task.num_keys * task.num_values == 1, "--task ",
                   task.name, ": the needle sweep takes a single-needle task (niah_single_1, _2 or _3)");
    std::vector<std::string> rows;
    std::vector<double> fractions;
    for (double d : needle->depths) {
      NANOVLLM_CHECK(d >= 0 && d <= 100, "--depths: ", d, " is not a percentage in [0, 100]");
      rows.push_back(depth_label(d));
      fractions.push_back(d / 100.0);
    }
    run_and_report(*needle, "needle", rows, "depth",
                   [](const eval::Sample& s) { return depth_label(s.depth * 100.0); },
                   eval::needle_requests(task, fractions, needle->contexts, needle->samples));
  });
}

}  // namespace nanovllm::cli
