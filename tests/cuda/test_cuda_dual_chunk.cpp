// Dual Chunk Attention on CUDA against the CPU reference kernels (kernels/cpu/dual_chunk_*.cpp, themselves
// checked against a float64 reference in tests/kernels/dual_chunk_attention_test.cpp), on fresh random bf16
// inputs (the reference gets their exact fp32 values):
// - the prologue: three query rotations and the key at its position modulo the chunk, with and without q/k norms
//   and the length factor, positions on and around chunk boundaries, a padding token;
// - the attention: decode steps (the tensor-core split-KV kernel, and the SIMT one at head_dim 256, with the three
//   rotations; long contexts split, with the cluster combine and the global one),
//   prefill chunks with a cached prefix crossing two chunk boundaries, whole prompts over several chunks, mixed
//   steps (leading decodes through the decode kernel, and everything through the prefill kernel), the sm_90a wgmma
//   kernel and the SIMT one, GQA 1 / 2 / 4 / 7 / 8, head_dim 64 / 128 / 256, block sizes 16 / 32 / 256, chunk lengths 128
//   and 256, and a step within the first chunk (plain attention's kernels);
// - the engine: a tiny DCA model resident (decode graphs and eager) and offloaded gives the same tokens, and the
//   CPU backend's on the first tokens.
// Tolerances as tests/cuda/test_cuda_attention.cpp: bf16 outputs of fp32 math, atol 1e-2 + rtol 5e-3 per element.
// Benchmarks (DISABLED_, run by scripts/bench/dca_device.sh): DCA vs plain prefill at 128K and decode at 128K-1M.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/cuda_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/llm/llm.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::expect_close;
using cuda_test::random_bf16;

constexpr float kAtol = 1e-2f, kRtol = 5e-3f;

struct WgmmaGuard : cuda_test::RestoreOptions {
  explicit WgmmaGuard(bool on) { cuda_test::context().options.prefill_wgmma = on; }
};

// Per sequence (query length, context length).
struct Batch {
  std::vector<int32_t> qlen, ctx;
};

// Host metadata of a batch: shuffled block tables over the cache, the step's positions and slots.
struct HostMeta {
  int64_t T = 0, S = 0, MB = 0, max_q = 0, max_ctx = 0, leading = 0, NB = 0;
  std::vector<int32_t> cu{0}, ctx, bt, slots, positions, lens;
  AttentionMetadata view(int64_t BS) {
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = T;
    m.max_query_len = max_q;
    m.max_context_len = max_ctx;
    m.cu_seqlens_q = cuda_test::host_view(cu, {S + 1});
    m.context_lens = cuda_test::host_view(ctx, {S});
    m.block_tables = cuda_test::host_view(bt, {S, MB});
    m.slot_mapping = cuda_test::host_view(slots, {T});
    m.dca_scale_lens = cuda_test::host_view(lens, {T});
    m.block_size = BS;
    m.num_leading_decodes = leading;
    return m;
  }
};

HostMeta make_meta(const Batch& b, int64_t BS, std::mt19937& rng) {
  HostMeta m;
  m.S = static_cast<int64_t>(b.qlen.size());
  for (int64_t s = 0; s < m.S; ++s) {
    m.cu.push_back(m.cu.back() + b.qlen[static_cast<size_t>(s)]);
    m.MB = std::max<int64_t>(m.MB, (b.ctx[static_cast<size_t>(s)] + BS - 1) / BS);
    m.max_q = std::max<int64_t>(m.max_q, b.qlen[static_cast<size_t>(s)]);
    m.max_ctx = std::max<int64_t>(m.max_ctx, b.ctx[static_cast<size_t>(s)]);
    m.NB += (b.ctx[static_cast<size_t>(s)] + BS - 1) / BS;
  }
  m.NB += 3;
  m.T = m.cu.back();
  m.ctx = b.ctx;
  while (m.leading < m.S && b.qlen[static_cast<size_t>(m.leading)] == 1) ++m.leading;
  std::vector<int32_t> perm(static_cast<size_t>(m.NB));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  m.bt.assign(static_cast<size_t>(m.S * m.MB), -1);
  size_t next = 0;
  for (int64_t s = 0; s < m.S; ++s) {
    const int32_t ctx = b.ctx[static_cast<size_t>(s)];
    for (int64_t j = 0; j < (ctx + BS - 1) / BS; ++j) m.bt[static_cast<size_t>(s * m.MB + j)] = perm.at(next++);
    for (int32_t t = m.cu[static_cast<size_t>(s)]; t < m.cu[static_cast<size_t>(s) + 1]; ++t) {
      const int32_t pos = ctx - (m.cu[static_cast<size_t>(s) + 1] - t);
      m.positions.push_back(pos);
      m.slots.push_back(m.bt[static_cast<size_t>(s * m.MB + pos / BS)] * static_cast<int32_t>(BS) +
                        pos % static_cast<int32_t>(BS));
      // Prompt tokens: the whole prompt's length (a decode row here is a generated token: position + 1).
      m.lens.push_back(b.qlen[static_cast<size_t>(s)] == 1 ? pos + 1 : ctx + 7);
    }
  }
  return m;
}

// Device copies of a HostMeta.
struct DeviceMeta {
  DeviceTensor cu, ctx, bt, slots, lens;
  AttentionMetadata meta;
  DeviceMeta(HostMeta& m, int64_t BS)
      : cu(DType::kI32, {m.S + 1}, m.cu), ctx(DType::kI32, {m.S}, m.ctx), bt(DType::kI32, {m.S, m.MB}, m.bt),
        slots(DType::kI32, {m.T}, m.slots), lens(DType::kI32, {m.T}, m.lens) {
    meta = m.view(BS);
    meta.cu_seqlens_q = cu.view();
    meta.context_lens = ctx.view();
    meta.block_tables = bt.view();
    meta.slot_mapping = slots.view();
    meta.dca_scale_lens = lens.view();
  }
};

std::string describe(const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, int64_t L) {
  std::string s = "Hq=" + std::to_string(Hq) + " Hk=" + std::to_string(Hk) + " D=" + std::to_string(D) +
                  " BS=" + std::to_string(BS) + " L=" + std::to_string(L) + " seqs:";
  for (size_t i = 0; i < b.qlen.size(); ++i) s += " (" + std::to_string(b.qlen[i]) + "," + std::to_string(b.ctx[i]) + ")";
  return s;
}

// dual_chunk_attention on random q [3, T, Hq, D] and caches against cpu::dual_chunk_attention; mixed batches
// also with num_leading_decodes = 0 (every row through the prefill kernel); wgmma on and off.
void check_attention(const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, int64_t L, uint32_t seed) {
  std::mt19937 rng(seed);
  HostMeta m = make_meta(b, BS, rng);
  const int64_t T = m.T, NB = m.NB;
  const ops::DualChunkParams dca{.chunk_len = L, .chunk_size = L + 37, .original_max_position_embeddings = 0};
  auto q = random_bf16(static_cast<size_t>(3 * T * Hq * D), rng, -2.0f, 2.0f);
  auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
  auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
  DeviceTensor d_q(DType::kBF16, {3, T, Hq, D}, q.bits), d_out(DType::kBF16, {T, Hq, D});
  DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits);
  DeviceMeta dm(m, BS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> ref(static_cast<size_t>(T * Hq * D));
  cpu::dual_chunk_attention(cuda_test::host_view(ref, {T, Hq, D}), cuda_test::host_view(q.f32, {3, T, Hq, D}),
                            cuda_test::host_view(kc.f32, {NB, BS, Hk, D}), cuda_test::host_view(vc.f32, {NB, BS, Hk, D}),
                            m.view(BS), dca, scale);
  const std::string what = describe(b, Hq, Hk, D, BS, L);
  std::vector<int64_t> leading{m.leading};
  if (m.leading > 0 && m.max_q > 1) leading.push_back(0);
  for (const bool wgmma : {true, false}) {
    WgmmaGuard guard(wgmma);
    for (const int64_t lead : leading) {
      dm.meta.num_leading_decodes = lead;
      d_out.fill_bytes(0xff);  // NaN: every output row must be written
      cuda_ops::dual_chunk_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, dca, scale,
                                     cuda_test::on());
      expect_close(d_out.download_f32(), ref, kAtol, kRtol,
                   what + (wgmma ? " wgmma" : " simt") + " num_leading_decodes=" + std::to_string(lead));
    }
  }
}

TEST(CudaDualChunk, DecodeAroundChunkBoundaries) {
  SKIP_WITHOUT_CUDA();
  // Positions L - 1 (the first chunk: plain), L, L + 1 (successive only), 2L - 1, 2L (inter begins), and far.
  const int64_t L = 128;
  const Batch b{{1, 1, 1, 1, 1, 1, 1}, {128, 129, 130, 256, 257, 700, 1283}};
  uint32_t seed = 1;
  for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{8, 8}, {16, 8}, {14, 2}, {32, 4}})
    for (int64_t D : {64, 128}) check_attention(b, Hq, Hk, D, 16, L, seed++);
  check_attention(b, 8, 2, 256, 16, L, seed++);  // head_dim 256: the SIMT decode kernel
}

struct ClusterCombineGuard : cuda_test::RestoreOptions {
  explicit ClusterCombineGuard(bool on) { cuda_test::context().options.decode_cluster_combine = on; }
};

TEST(CudaDualChunk, DecodeLongContextsSplit) {
  SKIP_WITHOUT_CUDA();
  // One or two sequences: the split-KV launch splits tens of thousands of keys (splits start inside chunks);
  // chunk length 256; the splits combined in a thread-block cluster (sm_90) and through global memory.
  for (bool cluster : {true, false}) {
    ClusterCombineGuard guard(cluster);
    check_attention({{1}, {40000}}, 28, 4, 128, 16, 256, 11);
    check_attention({{1, 1}, {33001, 9000}}, 16, 2, 64, 32, 256, 12);
  }
}

TEST(CudaDualChunk, PrefillChunksAcrossChunkBoundaries) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 21;
  // A chunk of 300 after a 400-token prefix crosses positions 512 and 640 (L = 128); a whole odd prompt over
  // five chunks; a short chunk right after a boundary; a chunk inside one chunk past the first.
  const Batch b{{300, 517, 17, 9}, {700, 517, 131, 300}};
  for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{8, 8}, {14, 2}, {32, 4}})
    for (int64_t D : {64, 128})
      for (int64_t BS : {16, 256}) check_attention(b, Hq, Hk, D, BS, 128, seed++);
  check_attention(b, 16, 2, 128, 32, 256, seed++);
}

TEST(CudaDualChunk, MixedStepsAndTheFirstChunk) {
  SKIP_WITHOUT_CUDA();
  // Leading decodes then prefill chunks (both dispatches), and a step whose every context is in the first
  // chunk (plain attention's kernels on the intra rotation).
  check_attention({{1, 1, 1, 200, 65}, {129, 600, 2047, 460, 1100}}, 28, 4, 128, 16, 128, 31);
  check_attention({{1, 1, 33}, {64, 128, 100}}, 16, 2, 128, 16, 128, 32);
  check_attention({{1, 250}, {1000, 250}}, 8, 1, 64, 16, 128, 33);
}

// dual_chunk_qkv_prologue on CUDA against the CPU one: q [3, T, Hq, D] and both caches.
TEST(CudaDualChunk, PrologueMatchesReference) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 41;
  for (int64_t D : {64, 128})
    for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{8, 8}, {28, 4}, {7, 1}})
      for (bool norms : {false, true})
        for (int64_t orig : {0, 300}) {
          std::mt19937 rng(seed++);
          const int64_t BS = 16, L = 128;
          const ops::DualChunkParams dca{.chunk_len = L, .chunk_size = L + 40, .original_max_position_embeddings = orig};
          HostMeta m = make_meta({{17, 1, 129, 2}, {140, 1000, 300, 257}}, BS, rng);
          m.slots[3] = -1;  // a padding token: q written, nothing cached
          const int64_t T = m.T, NB = m.NB, W = (Hq + 2 * Hk) * D;
          auto qkv = random_bf16(static_cast<size_t>(T * W), rng, -3.0f, 3.0f);
          auto qn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
          auto kn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
          auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
          auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
          std::vector<float> inv_freq(static_cast<size_t>(D / 2));
          for (int64_t i = 0; i < D / 2; ++i)
            inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e7, -2.0 * static_cast<double>(i) / D));
          DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_qn(DType::kBF16, {D}, qn.bits),
              d_kn(DType::kBF16, {D}, kn.bits), d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits),
              d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits), d_pos(DType::kI32, {T}, m.positions),
              d_if(DType::kF32, {D / 2}, inv_freq), d_q(DType::kBF16, {3, T, Hq, D});
          d_q.fill_bytes(0xff);
          DeviceMeta dm(m, BS);
          cuda_ops::dual_chunk_qkv_prologue(d_q.view(), d_qkv.view(), norms ? d_qn.view() : TensorView(),
                                            norms ? d_kn.view() : TensorView(), 1e-6f, d_pos.view(),
                                            ops::RopeParams{d_if.view(), 1.0f, false}, dca, d_k.view(), d_v.view(),
                                            dm.meta, cuda_test::on());
          std::vector<float> ref_q(static_cast<size_t>(3 * T * Hq * D)), ref_k = kc.f32, ref_v = vc.f32;
          cpu::dual_chunk_qkv_prologue(cuda_test::host_view(ref_q, {3, T, Hq, D}), cuda_test::host_view(qkv.f32, {T, W}),
                                       norms ? cuda_test::host_view(qn.f32, {D}) : TensorView(),
                                       norms ? cuda_test::host_view(kn.f32, {D}) : TensorView(), 1e-6f,
                                       cuda_test::host_view(m.positions, {T}), inv_freq.data(), 1.0f, dca,
                                       cuda_test::host_view(ref_k, {NB, BS, Hk, D}),
                                       cuda_test::host_view(ref_v, {NB, BS, Hk, D}), m.view(BS));
          const std::string what = "DCA prologue D=" + std::to_string(D) + " Hq=" + std::to_string(Hq) +
                                   " Hk=" + std::to_string(Hk) + (norms ? " norms" : "") +
                                   " original_max_position_embeddings=" + std::to_string(orig);
          expect_close(d_q.download_f32(), ref_q, kAtol, kRtol, what + " q");
          expect_close(d_k.download_f32(), ref_k, kAtol, kRtol, what + " k cache");
          expect_close(d_v.download_f32(), ref_v, 0, 0, what + " v cache");
        }
}

TEST(CudaDualChunk, ChunkLengthMustFitTheKeyTiles) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(51);
  HostMeta m = make_meta({{1}, {300}}, 16, rng);
  DeviceMeta dm(m, 16);
  DeviceTensor d_q(DType::kBF16, {3, 1, 2, 64}), d_out(DType::kBF16, {1, 2, 64});
  DeviceTensor d_k(DType::kBF16, {m.NB, 16, 1, 64}), d_v(DType::kBF16, {m.NB, 16, 1, 64});
  try {
    cuda_ops::dual_chunk_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta,
                                   {.chunk_len = 100, .chunk_size = 120}, 1.0f, cuda_test::on());
    ADD_FAILURE() << "no error for a chunk length of 100";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
  }
}

// The engine on a tiny DCA model (head_dim 64, chunks of 128 positions, logits scaled past 200 tokens): decode
// graphs, eager decode and CPU offload give the same tokens; the CPU backend's on the first 16 of each prompt. Two
// families (CudaDualChunkEngine.*/Qwen2, /Qwen3Moe): dca-tiny, and qwen3-moe-tiny as the Qwen3-2507 MoE releases
// run their 1M configuration, both with tied embeddings (untied, the random MoE model's bf16 near-ties flipped
// tokens between graphs and eager decode on an H200).
class CudaDualChunkEngine : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(, CudaDualChunkEngine, ::testing::Values("dca-tiny", "qwen3-moe-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::string(info.param == "dca-tiny" ? "Qwen2" : "Qwen3Moe");
                         });

TEST_P(CudaDualChunkEngine, ResidentOffloadedAndCpu) {
  SKIP_WITHOUT_CUDA();
  EngineConfig ec;
  ec.model.path = testing::preset_model_dir(
      GetParam(), "cuda",
      {{"head_dim", 64},
       {"num_key_value_heads", 1},
       {"tie_word_embeddings", true},  // peaked logits (dca-tiny is tied already): random weights leave near-ties
       {"dual_chunk_attention_config",
        {{"chunk_size", 160}, {"local_size", 32}, {"original_max_position_embeddings", 200}}}},
      61);
  ec.model.backend = Backend::kCuda;
  ec.model.max_model_len = 1024;
  ec.cache.block_size = 16;
  ec.cache.num_kv_blocks = 256;
  ec.scheduler.max_num_batched_tokens = 1024;
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {5, 127, 300, 520}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;  // decodes cross chunk boundaries (128 of the 127-token prompt)
  const auto gpu = LLM(ec).generate(prompts, sp);
  EngineConfig eager = ec;
  eager.model.enforce_eager = true;
  const auto gpu_eager = LLM(eager).generate(prompts, sp);
  EngineConfig off = ec;
  off.offload.enabled = true;
  off.offload.min_tokens = 1;
  off.offload.block_size = 64;
  off.offload.max_num_seqs = 2;
  const auto gpu_off = LLM(off).generate(prompts, sp);
  EngineConfig cpu = ec;
  cpu.model.backend = Backend::kCpu;
  const auto ref = LLM(cpu).generate(prompts, sp);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(gpu_eager[i].token_ids, gpu[i].token_ids) << "prompt " << i;
    EXPECT_EQ(gpu_off[i].token_ids, gpu_eager[i].token_ids) << "prompt " << i;
    ASSERT_EQ(gpu[i].token_ids.size(), ref[i].token_ids.size());
    EXPECT_TRUE(std::equal(gpu[i].token_ids.begin(), gpu[i].token_ids.begin() + 16, ref[i].token_ids.begin()))
        << "prompt " << i << ": the first 16 tokens differ from the CPU backend's";
  }
}

// ---- Benchmarks (timing; run with --gtest_also_run_disabled_tests) ----

// Median ms of `reps` runs of fn on the default stream.
template <class Fn>
double median_ms(Fn fn, int reps) {
  for (int i = 0; i < 2; ++i) fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> ms = cuda_test::time_each_ms(nullptr, reps, fn);
  return ms[ms.size() / 2];
}

// One attention layer of the Qwen2.5-7B-1M shape (Hq 28, Hk 4, D 128, block 16): dual_chunk_attention vs
// paged_attention over the same cache. Prefill: one chunk of `qlen` rows ending at `ctx`; decode: `seqs` rows.
void bench_layer(const char* name, const Batch& b, int64_t L, int reps) {
  const int64_t Hq = 28, Hk = 4, D = 128, BS = 16;
  std::mt19937 rng(7);
  HostMeta m = make_meta(b, BS, rng);
  const int64_t T = m.T, NB = m.NB;
  auto q = random_bf16(static_cast<size_t>(3 * T * Hq * D), rng, -2.0f, 2.0f);
  DeviceTensor d_q(DType::kBF16, {3, T, Hq, D}, q.bits), d_out(DType::kBF16, {T, Hq, D});
  DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}), d_v(DType::kBF16, {NB, BS, Hk, D});
  d_k.fill_bytes(0x3c);  // finite bf16 values (timing only)
  d_v.fill_bytes(0x3c);
  DeviceMeta dm(m, BS);
  const ops::DualChunkParams dca{.chunk_len = L, .chunk_size = L + 8192, .original_max_position_embeddings = 0};
  const float scale = 0.088f;
  const TensorView q0(d_q.view().data(), DType::kBF16, Shape{T, Hq, D}, d_q.view().device());
  const double plain = median_ms(
      [&] { cuda_ops::paged_attention(d_out.view(), q0, d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on()); }, reps);
  const double dual = median_ms(
      [&] {
        cuda_ops::dual_chunk_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, dca, scale,
                                       cuda_test::on());
      },
      reps);
  std::printf("%-34s chunk_len %7lld: plain %8.3f ms  DCA %8.3f ms  ratio %.2f\n", name, static_cast<long long>(L),
              plain, dual, dual / plain);
}

TEST(CudaDualChunkBench, DISABLED_PrefillAndDecode) {
  SKIP_WITHOUT_CUDA();
  const int64_t real_L = 262144 - 8192;  // Qwen2.5-7B-Instruct-1M: 128K is inside the first chunk
  const int64_t small_L = 32768 - 4096;  // a config whose chunks 128K spans (five of them)
  const int32_t k128 = 131072;
  // Prefill: the last 8K-row chunk of a 128K prompt (the chunked-prefill step at the end of the prompt).
  bench_layer("prefill 8K rows at 128K", {{8192}, {k128}}, real_L, 5);
  bench_layer("prefill 8K rows at 128K", {{8192}, {k128}}, small_L, 5);
  // Decode: batch 1 at 128K and 1M, batch 8 at 128K.
  bench_layer("decode bs1 at 128K", {{1}, {k128}}, real_L, 50);
  bench_layer("decode bs1 at 128K", {{1}, {k128}}, small_L, 50);
  bench_layer("decode bs1 at 1M", {{1}, {1 << 20}}, real_L, 20);
  bench_layer("decode bs8 at 128K", {std::vector<int32_t>(8, 1), std::vector<int32_t>(8, k128)}, small_L, 20);
}

}  // namespace
}  // namespace nanovllm
