// ops.cpp rejects inconsistent inputs with a clear nanovllm::Error (message checked for the culprit).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/expect_error.h"

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/copy_ops.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

using testing::expect_error;

TEST(OpsValidation, CopyBatchCopiesAndRefusesOverlaps) {
  std::vector<char> a(64), b(64, 'x');
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>('A' + i % 26);
  const std::vector<ops::ByteCopy> copies{{b.data(), a.data() + 3, 5}, {b.data() + 9, a.data(), 0},
                                          {b.data() + 10, a.data() + 40, 7}};
  ops::copy_batch(copies, Device::cpu());
  EXPECT_EQ(std::string(b.data(), 20), std::string("DEFGHxxxxxOPQRSTUxxx"));
  expect_error([&] { ops::copy_batch(std::vector<ops::ByteCopy>{{a.data() + 8, a.data(), 9}}, Device::cpu()); },
               {"overlaps"});  // a destination over its own source
  expect_error([&] {
    ops::copy_batch(std::vector<ops::ByteCopy>{{b.data(), a.data(), 4}, {a.data() + 2, b.data() + 30, 4}},
                    Device::cpu());
  }, {"overlaps"});  // a destination over another copy's source
  expect_error([&] {
    ops::copy_batch(std::vector<ops::ByteCopy>{{b.data(), a.data(), 4}, {b.data() + 3, a.data() + 9, 4}},
                    Device::cpu());
  }, {"overlaps"});  // two destinations
  expect_error([&] { ops::copy_batch(std::vector<ops::ByteCopy>{{nullptr, a.data(), 4}}, Device::cpu()); },
               {"copy 0 of 4 bytes has a null pointer"});
}

TEST(OpsValidation, EmbeddingIdsOutOfRange) {
  std::mt19937 rng(1);
  HostTensor table = test::random_tensor(DType::kF32, {10, 4}, rng);
  HostTensor out(DType::kF32, {2, 4});
  HostTensor ids = test::i32_tensor({3, 10});
  expect_error([&] { ops::embedding(out.v, ids.v, table.v); }, {"ids[1] = 10"});
  HostTensor neg = test::i32_tensor({-1, 0});
  expect_error([&] { ops::embedding(out.v, neg.v, table.v); }, {"outside the vocabulary"});
  HostTensor wrong_dtype(DType::kF32, {2});
  expect_error([&] { ops::embedding(out.v, wrong_dtype.v, table.v); }, {"ids must be I32"});
}

TEST(OpsValidation, ShapeMismatches) {
  std::mt19937 rng(2);
  HostTensor x = test::random_tensor(DType::kF32, {3, 8}, rng);
  HostTensor w7 = test::random_tensor(DType::kF32, {7}, rng);
  HostTensor out(DType::kF32, {3, 8});
  expect_error([&] { ops::rms_norm(out.v, x.v, w7.v, 1e-6f); }, {"weight has shape [7]"});
  HostTensor lw = test::random_tensor(DType::kF32, {5, 9}, rng);
  HostTensor lout(DType::kF32, {3, 5});
  expect_error([&] { ops::linear(lout.v, x.v, lw.v, TensorView()); }, {"in-features"});
  HostTensor lw2 = test::random_tensor(DType::kF32, {5, 8}, rng);
  HostTensor bias = test::random_tensor(DType::kF32, {4}, rng);
  expect_error([&] { ops::linear(lout.v, x.v, lw2.v, bias.v); }, {"bias has shape"});
  HostTensor odd(DType::kF32, {3, 7}), half(DType::kF32, {3, 3});
  expect_error([&] { ops::silu_mul(half.v, odd.v); }, {"odd width"});
  HostTensor gu_w = test::random_tensor(DType::kF32, {6, 8}, rng), down_w = test::random_tensor(DType::kF32, {5, 3}, rng);
  HostTensor mlp_out(DType::kF32, {3, 5}), gu6(DType::kF32, {3, 6}), act3(DType::kF32, {3, 3});
  HostTensor gu_odd = test::random_tensor(DType::kF32, {7, 8}, rng);
  expect_error([&] { ops::silu_mlp(mlp_out.v, x.v, gu_odd.v, down_w.v, gu6.v, act3.v); }, {"odd number of rows"});
  HostTensor down_w4 = test::random_tensor(DType::kF32, {5, 4}, rng);
  expect_error([&] { ops::silu_mlp(mlp_out.v, x.v, gu_w.v, down_w4.v, gu6.v, act3.v); }, {"down_w [5, 4]"});
  HostTensor act6(DType::kF32, {3, 6});
  expect_error([&] { ops::silu_mlp(mlp_out.v, x.v, gu_w.v, down_w.v, gu6.v, act6.v); }, {"act has shape [3, 6]"});
  HostTensor rows = test::i32_tensor({0, 3});
  HostTensor g(DType::kF32, {2, 8});
  expect_error([&] { ops::gather_rows(g.v, x.v, rows.v); }, {"rows[1] = 3"});
  HostTensor ints(DType::kI32, {3, 8});
  expect_error([&] { ops::convert(ints.v, x.v); }, {"must be F32, BF16 or F16"});
}

struct AttnFixture {
  std::mt19937 rng{3};
  int64_t T = 3, Hq = 4, Hk = 2, D = 8, NB = 4, BS = 4;
  HostTensor q = test::random_tensor(DType::kF32, {T, Hq, D}, rng);
  HostTensor out{DType::kF32, {T, Hq, D}};
  HostTensor kc = test::random_tensor(DType::kF32, {NB, BS, Hk, D}, rng);
  HostTensor vc = test::random_tensor(DType::kF32, {NB, BS, Hk, D}, rng);
  HostTensor cu = test::i32_tensor({0, 2, 3});
  HostTensor ctx = test::i32_tensor({6, 1});
  HostTensor bt = test::i32_tensor({2, 0, 3, -1}, {2, 2});
  HostTensor slots = test::i32_tensor({12, 13, 1});
  AttentionMetadata meta;
  AttnFixture() {
    meta.num_seqs = 2;
    meta.num_tokens = T;
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = BS;
  }
  void attend() { ops::paged_attention(out.v, q.v, kc.v, vc.v, meta, 0.3f); }
};

TEST(OpsValidation, AttentionMetadata) {
  { AttnFixture f; EXPECT_NO_THROW(f.attend()); }
  { AttnFixture f; f.bt.i32()[1] = 4; expect_error([&] { f.attend(); }, {"block_tables[0][1] = 4"}); }
  { AttnFixture f; f.ctx.i32()[0] = 1; expect_error([&] { f.attend(); }, {"context_lens 1 < its 2"}); }
  { AttnFixture f; f.ctx.i32()[0] = 9; expect_error([&] { f.attend(); }, {"needs 3 blocks"}); }
  { AttnFixture f; f.cu.i32()[2] = 2; expect_error([&] { f.attend(); }, {"cu_seqlens_q[2] = 2"}); }
  { AttnFixture f; f.meta.block_size = 8; expect_error([&] { f.attend(); }, {"block_size 8"}); }
  // num_leading_decodes promises one-token queries (the CUDA backend runs those through its decode kernel).
  { AttnFixture f; f.meta.num_leading_decodes = 1; expect_error([&] { f.attend(); }, {"sequence 0 has 2 query tokens"}); }
  { AttnFixture f; f.meta.num_leading_decodes = 3; expect_error([&] { f.attend(); }, {"num_leading_decodes 3 is outside [0, 2]"}); }
  {
    AttnFixture f;  // Hq % Hk != 0
    HostTensor kc3(DType::kF32, {f.NB, f.BS, 3, f.D}), vc3(DType::kF32, {f.NB, f.BS, 3, f.D});
    expect_error([&] { ops::paged_attention(f.out.v, f.q.v, kc3.v, vc3.v, f.meta, 0.3f); }, {"multiple of KV heads"});
  }
  {
    AttnFixture f;
    HostTensor vbf(DType::kBF16, {f.NB, f.BS, f.Hk, f.D});
    expect_error([&] { ops::paged_attention(f.out.v, f.q.v, f.kc.v, vbf.v, f.meta, 0.3f); }, {"v_cache is BF16"});
  }
}

TEST(OpsValidation, QkvPrologue) {
  AttnFixture f;
  HostTensor pos = test::i32_tensor({0, 1, 5});
  HostTensor inv = test::random_tensor(DType::kF32, {f.D / 2}, f.rng, 0.1f, 1.0f);
  HostTensor qkv = test::random_tensor(DType::kF32, {f.T, (f.Hq + 2 * f.Hk) * f.D}, f.rng);
  auto call = [&] {
    ops::qkv_prologue(f.q.v, qkv.v, TensorView(), TensorView(), 1e-6f, pos.v, {inv.v, 1.0f}, f.kc.v, f.vc.v,
                      f.meta);
  };
  EXPECT_NO_THROW(call());
  f.slots.i32()[2] = 16;  // NB * BS = 16
  expect_error(call, {"slot_mapping[2] = 16"});
  f.slots.i32()[2] = -1;
  pos.i32()[1] = -3;
  expect_error(call, {"positions[1] = -3"});
  pos.i32()[1] = 1;
  // Odd head_dim.
  HostTensor q7(DType::kF32, {f.T, f.Hq, 7}), kc7(DType::kF32, {f.NB, f.BS, f.Hk, 7}), vc7(DType::kF32, {f.NB, f.BS, f.Hk, 7});
  HostTensor qkv7(DType::kF32, {f.T, (f.Hq + 2 * f.Hk) * 7}), inv3(DType::kF32, {3});
  expect_error([&] {
    ops::qkv_prologue(q7.v, qkv7.v, TensorView(), TensorView(), 1e-6f, pos.v, {inv3.v, 1.0f}, kc7.v, vc7.v, f.meta);
  }, {"must be even"});
  HostTensor inv_bad(DType::kF32, {3});
  expect_error([&] {
    ops::qkv_prologue(f.q.v, qkv.v, TensorView(), TensorView(), 1e-6f, pos.v, {inv_bad.v, 1.0f}, f.kc.v, f.vc.v,
                      f.meta);
  }, {"rope.inv_freq has shape [3]"});
}

TEST(OpsValidation, CudaTensorsWithoutCuda) {
#if NANOVLLM_WITH_CUDA
  GTEST_SKIP() << "built with CUDA";
#else
  std::vector<float> storage(64);  // never dereferenced: the op must refuse before touching it
  TensorView x(storage.data(), DType::kF32, {4, 8}, Device::cuda(0));
  TensorView w(storage.data(), DType::kF32, {8}, Device::cuda(0));
  expect_error([&] { ops::rms_norm(x, x, w, 1e-6f); }, {"built without CUDA"});
  TensorView w_cpu(storage.data(), DType::kF32, {8});
  expect_error([&] { ops::rms_norm(x, x, w_cpu, 1e-6f); }, {"weight is on cpu"});
#endif
}

// A CUDA op runs on a runner's kernel context (ops::Stream::cuda_context): without one it refuses before
// any launch, so this holds on machines without a GPU too.
TEST(OpsValidation, CudaTensorsNeedADeviceContext) {
#if !NANOVLLM_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  std::vector<float> storage(64);  // never dereferenced: the op must refuse before touching it
  TensorView x(storage.data(), DType::kF32, {4, 8}, Device::cuda(0));
  TensorView w(storage.data(), DType::kF32, {8}, Device::cuda(0));
  expect_error([&] { ops::rms_norm(x, x, w, 1e-6f); }, {"without a device context"});
  expect_error([&] { ops::linear(x, x, TensorView(storage.data(), DType::kF32, {8, 8}, Device::cuda(0)),
                                 TensorView()); },
               {"without a device context"});
#endif
}

}  // namespace
}  // namespace nanovllm
