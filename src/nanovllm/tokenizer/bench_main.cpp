// tokenizer_bench <model_dir> <corpus.txt> [passes]: prints single-thread encode MB/s as JSON.
// (Standalone driver; the `nanovllm` CLI wires bench_tokenizer() itself.)
#include <cstdio>
#include <fstream>
#include <sstream>

#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/bench.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <model_dir> <corpus.txt> [passes]\n", argv[0]);
    return 2;
  }
  try {
    const auto tok = nanovllm::Tokenizer::from_model_dir(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const auto r = nanovllm::tokenizer::bench_tokenizer(tok, ss.str(), argc > 3 ? std::atoi(argv[3]) : 3);
    std::printf("{\"bytes\": %lld, \"tokens\": %lld, \"chunks\": %lld, \"seconds\": %.4f, \"mb_per_s\": %.2f, "
                "\"tokens_per_s\": %.0f}\n",
                static_cast<long long>(r.bytes), static_cast<long long>(r.tokens),
                static_cast<long long>(r.chunks), r.seconds, r.mb_per_s, r.tokens_per_s);
  } catch (const nanovllm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
