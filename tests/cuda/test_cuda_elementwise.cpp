// CUDA embedding / rms_norm / add_rms_norm / copy_rms_norm / gather_add_rms_norm / silu_mul / gather_rows /
// convert against the CPU reference
// kernels (fp32 inputs holding exactly the bf16 values the GPU sees).
// Tolerance for bf16 outputs vs the fp32 reference: the GPU rounds once to bf16 (<= half an ulp,
// 2^-8 relative), plus fp32 reduction-order noise: atol 1e-2 + rtol 5e-3 per element.
#include "cuda_test_util.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm {
namespace {

using cuda_test::bf16_bits_to_f32;
using cuda_test::DeviceTensor;
using cuda_test::expect_close;
using cuda_test::random_bf16;

constexpr float kAtol = 1e-2f, kRtol = 5e-3f;

TEST(CudaElementwise, EmbeddingCopiesRows) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(1);
  for (int64_t H : {8, 1001, 4096}) {
    for (int64_t T : {1, 17, 129}) {
      const int64_t V = 1000;
      auto table = random_bf16(static_cast<size_t>(V * H), rng);
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (auto& i : ids) i = static_cast<int32_t>(rng() % V);
      DeviceTensor d_table(DType::kBF16, {V, H}, table.bits), d_ids(DType::kI32, {T}, ids);
      DeviceTensor d_out(DType::kBF16, {T, H});
      d_out.fill_bytes(0xff);  // NaN poison
      cuda_ops::embedding(d_out.view(), d_ids.view(), d_table.view(), cuda_test::on());
      std::vector<float> ref(static_cast<size_t>(T * H));
      cpu::embedding(cuda_test::host_view(ref, {T, H}), cuda_test::host_view(ids, {T}),
                     cuda_test::host_view(table.f32, {V, H}));
      expect_close(d_out.download_f32(), ref, 0, 0, "embedding H=" + std::to_string(H));
    }
  }
}

// A vocab-parallel rank's rows (ids [begin, begin + rows) of the vocabulary; others zero) against the CPU
// reference, for each rank of a split; and the all-gathered logits' un-padding.
TEST(CudaElementwise, EmbeddingVocabShardMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(11);
  for (int64_t H : {8, 1001, 4096}) {
    for (int64_t n : {2, 3}) {
      const int64_t V = 1000, T = 129, rows = (V + n - 1) / n;
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (auto& i : ids) i = static_cast<int32_t>(rng() % V);
      for (int64_t r = 0; r < n; ++r) {
        auto table = random_bf16(static_cast<size_t>(rows * H), rng);
        DeviceTensor d_table(DType::kBF16, {rows, H}, table.bits), d_ids(DType::kI32, {T}, ids);
        DeviceTensor d_out(DType::kBF16, {T, H});
        d_out.fill_bytes(0xff);  // NaN poison
        cuda_ops::embedding_vocab_shard(d_out.view(), d_ids.view(), d_table.view(), r * rows, cuda_test::on());
        std::vector<float> ref(static_cast<size_t>(T * H));
        cpu::embedding(cuda_test::host_view(ref, {T, H}), cuda_test::host_view(ids, {T}),
                       cuda_test::host_view(table.f32, {rows, H}), r * rows);
        expect_close(d_out.download_f32(), ref, 0, 0,
                     "embedding_vocab_shard H=" + std::to_string(H) + " rank " + std::to_string(r));
      }
    }
  }
}

TEST(CudaElementwise, GatherVocabShardsMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  for (int64_t V : {17, 1001, 151936}) {
    for (int64_t n : {2, 3, 8}) {
      for (int64_t S : {1, 15}) {
        const int64_t per_rank = (V + n - 1) / n;
        std::vector<float> shards(static_cast<size_t>(n * S * per_rank));
        for (float& x : shards) x = u(rng);
        DeviceTensor d_shards(DType::kF32, {n, S, per_rank}, shards), d_out(DType::kF32, {S, V});
        d_out.fill_bytes(0xff);
        cuda_ops::gather_vocab_shards(d_out.view(), d_shards.view(), cuda_test::on());
        std::vector<float> ref(static_cast<size_t>(S * V));
        cpu::gather_vocab_shards(cuda_test::host_view(ref, {S, V}), cuda_test::host_view(shards, {n, S, per_rank}));
        expect_close(d_out.download_f32(), ref, 0, 0,
                     "gather_vocab_shards V=" + std::to_string(V) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST(CudaElementwise, RmsNormMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(2);
  for (int64_t H : {64, 1001, 4096, 40000}) {  // 1001: generic path; 40000: beyond the register path
    for (int64_t T : {1, 15, 16, 17, 129, 300}) {  // <= 256: one chunk per thread; 300: four
      auto x = random_bf16(static_cast<size_t>(T * H), rng, -3.0f, 3.0f);
      auto w = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
      DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_w(DType::kBF16, {H}, w.bits), d_out(DType::kBF16, {T, H});
      d_out.fill_bytes(0xff);
      cuda_ops::rms_norm(d_out.view(), d_x.view(), d_w.view(), 1e-6f, cuda_test::on());
      std::vector<float> ref(static_cast<size_t>(T * H));
      cpu::rms_norm(cuda_test::host_view(ref, {T, H}), cuda_test::host_view(x.f32, {T, H}),
                    cuda_test::host_view(w.f32, {H}), 1e-6f);
      expect_close(d_out.download_f32(), ref, kAtol, kRtol, "rms_norm T=" + std::to_string(T) + " H=" + std::to_string(H));
    }
  }
}

TEST(CudaElementwise, AddRmsNormKeepsBf16Residual) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  for (int64_t H : {64, 1001, 4096, 12288}) {  // 12288: 1536 chunks, more than one per thread at 1024 threads
    for (int64_t T : {1, 17, 129, 300}) {
      auto x = random_bf16(static_cast<size_t>(T * H), rng, -2.0f, 2.0f);
      auto r = random_bf16(static_cast<size_t>(T * H), rng, -4.0f, 4.0f);
      auto w = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
      DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_r(DType::kBF16, {T, H}, r.bits), d_w(DType::kBF16, {H}, w.bits);
      cuda_ops::add_rms_norm(d_x.view(), d_r.view(), d_w.view(), 1e-6f, cuda_test::on());
      // Reference: residual in bf16 on the CPU too (same single rounding of res + x), x in fp32.
      std::vector<float> ref_x = x.f32;
      std::vector<uint16_t> ref_r = r.bits;
      cpu::add_rms_norm(cuda_test::host_view(ref_x, {T, H}), TensorView(ref_r.data(), DType::kBF16, {T, H}),
                        cuda_test::host_view(w.f32, {H}), 1e-6f);
      expect_close(d_r.download_f32(), bf16_bits_to_f32(ref_r), 0, 0, "add_rms_norm residual H=" + std::to_string(H));
      expect_close(d_x.download_f32(), ref_x, kAtol, kRtol, "add_rms_norm x H=" + std::to_string(H));
    }
  }
}

// The first layer's norm: the residual is x's exact copy, x its norm.
TEST(CudaElementwise, CopyRmsNormMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(30);
  for (int64_t H : {64, 1001, 4096, 12288}) {  // 1001: generic path
    for (int64_t T : {1, 17, 129, 300}) {
      auto x = random_bf16(static_cast<size_t>(T * H), rng, -3.0f, 3.0f);
      auto w = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
      DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_r(DType::kBF16, {T, H}), d_w(DType::kBF16, {H}, w.bits);
      d_r.fill_bytes(0xff);  // NaN poison: every element must be written
      cuda_ops::copy_rms_norm(d_x.view(), d_r.view(), d_w.view(), 1e-6f, cuda_test::on());
      std::vector<float> ref(static_cast<size_t>(T * H));
      cpu::rms_norm(cuda_test::host_view(ref, {T, H}), cuda_test::host_view(x.f32, {T, H}),
                    cuda_test::host_view(w.f32, {H}), 1e-6f);
      const std::string what = "copy_rms_norm T=" + std::to_string(T) + " H=" + std::to_string(H);
      expect_close(d_r.download_f32(), x.f32, 0, 0, what + " residual");
      expect_close(d_x.download_f32(), ref, kAtol, kRtol, what + " x");
    }
  }
}

// The sampled rows before the LM head: gathered in any order (repeats too) from a larger batch, with a
// bf16 residual (16-byte path unless H = 1001) and an fp32 one (generic path); the inputs stay unchanged.
TEST(CudaElementwise, GatherAddRmsNormMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  for (const bool f32_residual : {false, true}) {
    for (int64_t H : {64, 1001, 4096, 12288}) {
      for (int64_t S : {1, 15, 17, 257}) {
        const int64_t T = S + 1 + static_cast<int64_t>(rng() % 40);
        auto x = random_bf16(static_cast<size_t>(T * H), rng, -2.0f, 2.0f);
        auto r = random_bf16(static_cast<size_t>(T * H), rng, -4.0f, 4.0f);
        auto w = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
        std::vector<int32_t> rows(static_cast<size_t>(S));
        for (auto& i : rows) i = static_cast<int32_t>(rng() % T);
        rows[0] = static_cast<int32_t>(T - 1);
        const DType rdt = f32_residual ? DType::kF32 : DType::kBF16;
        DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_w(DType::kBF16, {H}, w.bits), d_rows(DType::kI32, {S}, rows);
        DeviceTensor d_r = f32_residual ? DeviceTensor(DType::kF32, {T, H}, r.f32) : DeviceTensor(DType::kBF16, {T, H}, r.bits);
        DeviceTensor d_out(DType::kBF16, {S, H}), d_out_r(rdt, {S, H});
        d_out.fill_bytes(0xff);
        d_out_r.fill_bytes(0xff);
        cuda_ops::gather_add_rms_norm(d_out.view(), d_out_r.view(), d_x.view(), d_r.view(), d_rows.view(), d_w.view(),
                                      1e-6f, cuda_test::on());
        // Reference: the residual sums rounded to the residual's dtype on the CPU too.
        std::vector<float> ref(static_cast<size_t>(S * H)), ref_r32(static_cast<size_t>(S * H));
        std::vector<uint16_t> ref_r(static_cast<size_t>(S * H));
        const TensorView res_in = f32_residual ? cuda_test::host_view(r.f32, {T, H})
                                               : TensorView(r.bits.data(), DType::kBF16, {T, H});
        const TensorView res_out = f32_residual ? cuda_test::host_view(ref_r32, {S, H})
                                                : TensorView(ref_r.data(), DType::kBF16, {S, H});
        cpu::gather_add_rms_norm(cuda_test::host_view(ref, {S, H}), res_out, cuda_test::host_view(x.f32, {T, H}), res_in,
                                 cuda_test::host_view(rows, {S}), cuda_test::host_view(w.f32, {H}), 1e-6f);
        if (!f32_residual) ref_r32 = bf16_bits_to_f32(ref_r);
        const std::string what = std::string("gather_add_rms_norm ") + (f32_residual ? "f32" : "bf16") +
                                 " residual S=" + std::to_string(S) + " H=" + std::to_string(H);
        expect_close(d_out_r.download_f32(), ref_r32, 0, 0, what + " residual");  // the same one fp32 add
        expect_close(d_out.download_f32(), ref, kAtol, kRtol, what + " out");
        expect_close(d_x.download_f32(), x.f32, 0, 0, what + " x unchanged");
        expect_close(d_r.download_f32(), r.f32, 0, 0, what + " residual unchanged");
      }
    }
  }
}

// The prologue at decode sizes (a few heads per block) and beyond kSplitHeadsMaxTokens (one block per
// token); D = 64 / 128 / 256 take the 16-byte kernel (D = 64 with heads of mixed kinds in one warp), D = 96
// and 40 the generic one; each with GLM-4's interleaved partial RoPE as well. CudaPrologue.MatchesReference (test_cuda_attention.cpp) covers mixed batches.
TEST(CudaElementwise, QkvPrologueSmallAndLargeBatches) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(7);
  for (int64_t T : {1, 3, 1100}) {
    // pairs 0: rotate_half on the whole head; > 0: GLM-4's interleaved RoPE on the first 2 * pairs elements
    // (half the head, an odd count on the generic kernel, D = 96 and D = 40).
    for (auto [Hq, Hk, D, pairs] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{16, 8, 128, 0}, {6, 1, 64, 0},
                                    {4, 2, 256, 0}, {3, 1, 96, 0}, {32, 4, 128, 32}, {6, 3, 64, 16},
                                    {5, 1, 96, 21}, {3, 3, 40, 10}}) {
      const bool interleaved = pairs > 0;
      if (!interleaved) pairs = D / 2;
      const int64_t BS = 16, NB = (T + 40 + BS - 1) / BS, W = (Hq + 2 * Hk) * D;
      std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(NB * BS));
      for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
      std::shuffle(slots.begin(), slots.end(), rng);  // distinct slots
      slots.resize(static_cast<size_t>(T));
      if (T > 2) slots[1] = -1;  // padding token
      for (auto& p : pos) p = static_cast<int32_t>(rng() % 100000);
      auto qkv = random_bf16(static_cast<size_t>(T * W), rng, -3.0f, 3.0f);
      auto qn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f), kn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
      auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng), vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
      std::vector<float> inv_freq(static_cast<size_t>(pairs));
      for (int64_t i = 0; i < pairs; ++i)
        inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -static_cast<double>(i) / pairs));
      DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_qn(DType::kBF16, {D}, qn.bits), d_kn(DType::kBF16, {D}, kn.bits),
          d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits),
          d_pos(DType::kI32, {T}, pos), d_slots(DType::kI32, {T}, slots), d_if(DType::kF32, {pairs}, inv_freq),
          d_q(DType::kBF16, {T, Hq, D});
      d_q.fill_bytes(0xff);
      AttentionMetadata dm;
      dm.num_tokens = T;
      dm.block_size = BS;
      dm.slot_mapping = d_slots.view();
      cuda_ops::qkv_prologue(d_q.view(), d_qkv.view(), d_qn.view(), d_kn.view(), 1e-6f, d_pos.view(),
                             ops::RopeParams{d_if.view(), 1.05f, interleaved}, d_k.view(), d_v.view(), dm,
                             cuda_test::on());
      std::vector<float> ref_q(static_cast<size_t>(T * Hq * D)), ref_k = kc.f32, ref_v = vc.f32;
      AttentionMetadata hm = dm;
      hm.slot_mapping = cuda_test::host_view(slots, {T});
      cpu::qkv_prologue(cuda_test::host_view(ref_q, {T, Hq, D}), cuda_test::host_view(qkv.f32, {T, W}),
                        cuda_test::host_view(qn.f32, {D}), cuda_test::host_view(kn.f32, {D}), 1e-6f,
                        cuda_test::host_view(pos, {T}), inv_freq.data(), 1.05f,
                        cuda_test::host_view(ref_k, {NB, BS, Hk, D}), cuda_test::host_view(ref_v, {NB, BS, Hk, D}), hm,
                        pairs, interleaved);
      const std::string what = "prologue T=" + std::to_string(T) + " Hq=" + std::to_string(Hq) + " Hk=" +
                               std::to_string(Hk) + " D=" + std::to_string(D) +
                               (interleaved ? " interleaved pairs=" + std::to_string(pairs) : "");
      expect_close(d_q.download_f32(), ref_q, kAtol, kRtol, what + " q");
      expect_close(d_k.download_f32(), ref_k, kAtol, kRtol, what + " k cache");
      expect_close(d_v.download_f32(), ref_v, 0, 0, what + " v cache");
    }
  }
}

TEST(CudaElementwise, SiluMulMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(4);
  for (int64_t I : {8, 100, 3072}) {
    for (int64_t T : {1, 17, 257}) {
      auto gu = random_bf16(static_cast<size_t>(T * 2 * I), rng, -6.0f, 6.0f);
      DeviceTensor d_gu(DType::kBF16, {T, 2 * I}, gu.bits), d_out(DType::kBF16, {T, I});
      d_out.fill_bytes(0xff);
      cuda_ops::silu_mul(d_out.view(), d_gu.view(), cuda_test::on());
      std::vector<float> ref(static_cast<size_t>(T * I));
      cpu::silu_mul(cuda_test::host_view(ref, {T, I}), cuda_test::host_view(gu.f32, {T, 2 * I}));
      expect_close(d_out.download_f32(), ref, kAtol, kRtol, "silu_mul I=" + std::to_string(I));
    }
  }
}

TEST(CudaElementwise, GatherRowsCopiesSelectedRows) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  for (int64_t H : {3, 8, 4096}) {  // 3 bf16: 6-byte rows (byte path); 8: 16-byte path
    const int64_t T = 129, S = 17;
    auto in = random_bf16(static_cast<size_t>(T * H), rng);
    std::vector<int32_t> rows(static_cast<size_t>(S));
    for (auto& r : rows) r = static_cast<int32_t>(rng() % T);
    DeviceTensor d_in(DType::kBF16, {T, H}, in.bits), d_rows(DType::kI32, {S}, rows), d_out(DType::kBF16, {S, H});
    d_out.fill_bytes(0xff);
    cuda_ops::gather_rows(d_out.view(), d_in.view(), d_rows.view(), cuda_test::on());
    std::vector<float> ref(static_cast<size_t>(S * H));
    cpu::gather_rows(cuda_test::host_view(ref, {S, H}), cuda_test::host_view(in.f32, {T, H}),
                     cuda_test::host_view(rows, {S}));
    expect_close(d_out.download_f32(), ref, 0, 0, "gather_rows H=" + std::to_string(H));
  }
}

TEST(CudaElementwise, ConvertRoundsLikeTheHost) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(6);
  const int64_t n = 100003;
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  std::vector<float> src(static_cast<size_t>(n));
  for (auto& v : src) v = dist(rng) * (rng() % 2 ? 1e-6f : 1.0f);  // small and large magnitudes
  const DType types[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (DType from : types) {
    for (DType to : types) {
      // Source data in `from`, built on the host with the reference conversions.
      std::vector<uint8_t> raw(static_cast<size_t>(n) * dtype_size(from));
      std::vector<float> as_f32(static_cast<size_t>(n));
      for (size_t i = 0; i < src.size(); ++i) {
        if (from == DType::kF32) std::memcpy(raw.data() + 4 * i, &src[i], 4);
        uint16_t h = from == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
        if (from != DType::kF32) std::memcpy(raw.data() + 2 * i, &h, 2);
        as_f32[i] = load_as_f32(raw.data(), from, i);
      }
      DeviceTensor d_in(from, {n}, raw), d_out(to, {n});
      cuda_ops::convert(d_out.view(), d_in.view(), cuda_test::on());
      std::vector<uint8_t> ref(static_cast<size_t>(n) * dtype_size(to));
      cpu::convert(TensorView(ref.data(), to, {n}), cuda_test::host_view(as_f32, {n}));
      const std::vector<uint8_t> got = d_out.download<uint8_t>();
      EXPECT_EQ(got, ref) << "convert " << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

}  // namespace
}  // namespace nanovllm
