// tokenizer_bench <model_dir> <corpus.txt> [passes]: prints single-thread encode MB/s as JSON.
// tokenizer_bench <model_dir> <corpus.txt> --dump-ids OUT.bin: ids of the corpus encoded line by line
//   ("\n" kept), little-endian int32 — compare with scripts/tokenizer_golden.mjs --ids.
// (Standalone driver; the `nanovllm` CLI wires bench_tokenizer() itself.)
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
    const std::string corpus = ss.str();
    if (argc > 4 && std::string(argv[3]) == "--dump-ids") {
      std::vector<int32_t> all;
      size_t pos = 0;
      while (pos < corpus.size()) {
        size_t nl = corpus.find('\n', pos);
        const size_t end = nl == std::string::npos ? corpus.size() : nl + 1;
        const auto ids = tok.encode(std::string_view(corpus).substr(pos, end - pos));
        all.insert(all.end(), ids.begin(), ids.end());
        pos = end;
      }
      std::ofstream out(argv[4], std::ios::binary);
      out.write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * 4));
      std::printf("{\"ids\": %zu}\n", all.size());
      return 0;
    }
    const auto r = nanovllm::tokenizer::bench_tokenizer(tok, corpus, argc > 3 ? std::atoi(argv[3]) : 3);
    std::printf("{\"bytes\": %lld, \"tokens\": %lld, \"chunks\": %lld, \"seconds\": %.4f, \"mb_per_s\": %.2f, "
                "\"tokens_per_s\": %.0f, \"cold_mb_per_s\": %.2f}\n",
                static_cast<long long>(r.bytes), static_cast<long long>(r.tokens),
                static_cast<long long>(r.chunks), r.seconds, r.mb_per_s, r.tokens_per_s, r.cold_mb_per_s);
  } catch (const nanovllm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
