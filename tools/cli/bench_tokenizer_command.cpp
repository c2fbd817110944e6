// nanovllm bench tokenizer: single-thread encode throughput (MB/s, tokens/s) of a tokenizer.json.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/bench.h"
#include "text_util.h"

namespace nanovllm::cli {
namespace {

// tests/data/tokenizer/corpus.json, looked up from the working directory and from the executable's
// ancestors (build/<preset>/tools/nanovllm -> repository root).
std::filesystem::path find_default_corpus() {
  const std::filesystem::path rel = "tests/data/tokenizer/corpus.json";
  if (std::filesystem::is_regular_file(rel)) return rel;
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; !ec && up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (std::filesystem::is_regular_file(dir / rel)) return dir / rel;
    if (dir == dir.parent_path()) break;
  }
  NANOVLLM_FAIL("bench tokenizer: no --corpus given and ", rel.string(),
                " was not found (run from the repository root or pass --corpus FILE)");
}

// The golden corpus' cases (English, code, JSON, CJK, RTL scripts, emoji, random Unicode), one per line,
// repeated until the corpus has `target_bytes`.
std::string build_default_corpus(size_t target_bytes) {
  const std::filesystem::path path = find_default_corpus();
  const nlohmann::json j = read_json_file(path, "corpus");
  NANOVLLM_CHECK(j.contains("cases") && j["cases"].is_array(), path.string(), ": expected {\"cases\": [...]}");
  std::string once;
  for (const auto& c : j["cases"])
    if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty())
      once += c["text"].get<std::string>() + "\n";
  NANOVLLM_CHECK(!once.empty(), path.string(), ": no texts");
  std::string corpus;
  corpus.reserve(target_bytes + once.size());
  while (corpus.size() < target_bytes) corpus += once;
  return corpus;
}

}  // namespace

void register_bench_tokenizer(CLI::App& bench) {
  struct Options {
    std::string model, tokenizer, corpus;
    double corpus_mb = 8.0;
    int passes = 3;
    size_t chunk_bytes = 4096;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand("tokenizer", "single-thread encode throughput (MB/s, tokens/s)");
  CLI::Option* model = cmd->add_option("--model", opt->model, "model directory with tokenizer.json");
  CLI::Option* file = cmd->add_option("--tokenizer", opt->tokenizer, "a tokenizer.json file");
  model->excludes(file);
  cmd->add_option("--corpus", opt->corpus,
                  "UTF-8 text file (default: tests/data/tokenizer/corpus.json's cases repeated to --corpus-mb)");
  cmd->add_option("--corpus-mb", opt->corpus_mb, "size of the default corpus in MB")
      ->check(in_range_above(0, 4096))
      ->capture_default_str();
  cmd->add_option("--passes", opt->passes, "timed passes (the best is reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--chunk-bytes", opt->chunk_bytes, "encode() input size, cut at line ends")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    NANOVLLM_CHECK(!opt->model.empty() || !opt->tokenizer.empty(), "bench tokenizer: give --model DIR or "
                   "--tokenizer FILE");
    const Tokenizer tok = opt->model.empty() ? Tokenizer::from_file(opt->tokenizer) : load_model_tokenizer(opt->model);
    const std::string corpus = opt->corpus.empty()
                                   ? build_default_corpus(static_cast<size_t>(opt->corpus_mb * 1e6))
                                   : read_text_file(opt->corpus, "--corpus");
    NANOVLLM_CHECK(!corpus.empty(), "--corpus: ", opt->corpus, " is empty");
    const auto r = tokenizer::bench_tokenizer(tok, corpus, opt->passes, opt->chunk_bytes);
    if (opt->json) {
      nlohmann::json j = {{"bytes", r.bytes},       {"tokens", r.tokens},         {"chunks", r.chunks},
                          {"passes", r.passes},     {"seconds", r.seconds},       {"mb_per_s", r.mb_per_s},
                          {"tokens_per_s", r.tokens_per_s}, {"cold_mb_per_s", r.cold_mb_per_s}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("corpus: %.2f MB, %lld tokens in %lld chunks\n", r.bytes / 1e6, static_cast<long long>(r.tokens),
                  static_cast<long long>(r.chunks));
      std::printf("encode (1 thread, best of %d): %.2f MB/s, %.0f tokens/s (cold pass: %.2f MB/s)\n", r.passes,
                  r.mb_per_s, r.tokens_per_s, r.cold_mb_per_s);
    }
  });
}

}  // namespace nanovllm::cli
