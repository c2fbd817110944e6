// The one-shot peer-memory all-reduce (kernels/cuda/peer_all_reduce.*) on every GPU of the machine (>= 2):
// each rank's result equals, bit for bit, the CPU's rank-order fp32 sum of the ranks' bf16 inputs rounded
// to bf16 (the kernel's contract: the same bits on every rank); calls of many sizes in a row and CUDA graph
// replays keep the ranks' flags in step; abort() releases a rank whose peers never come. Skips with fewer
// than two GPUs or without peer access. Plus a timing of the kernel against NCCL (DISABLED_, timing only).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "nanovllm/core/dtype.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/peer_all_reduce.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/parallel/cuda/nccl_communicator.h"

namespace nanovllm {
namespace {

using cuda_ops::PeerAllReduce;

int peer_ranks() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int n = std::min(devices, PeerAllReduce::kMaxRanks);
  return PeerAllReduce::supported(n) ? n : 0;
}

#define SKIP_WITHOUT_PEERS()                                                                  \
  const int ranks = peer_ranks();                                                             \
  if (ranks < 2) GTEST_SKIP() << "needs 2 GPUs with peer access"

// Per rank: a device buffer and stream on GPU r.
struct RankBuffers {
  std::vector<void*> data;
  std::vector<cudaStream_t> streams;
  RankBuffers(int ranks, size_t bytes) {
    for (int r = 0; r < ranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      cudaStream_t s = nullptr;
      CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      data.push_back(p);
      streams.push_back(s);
    }
    CUDA_CHECK(cudaSetDevice(0));
  }
  ~RankBuffers() {
    for (size_t r = 0; r < data.size(); ++r) {
      CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
      CUDA_CHECK(cudaStreamSynchronize(streams[r]));
      CUDA_CHECK(cudaStreamDestroy(streams[r]));
      CUDA_CHECK(cudaFree(data[r]));
    }
    CUDA_CHECK(cudaSetDevice(0));
  }
  void sync() {
    for (size_t r = 0; r < data.size(); ++r) {
      CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
      CUDA_CHECK(cudaStreamSynchronize(streams[r]));
    }
    CUDA_CHECK(cudaSetDevice(0));
  }
};

// Random bf16 bits in roughly [-4, 4] (never all zeros), one vector per rank.
std::vector<std::vector<uint16_t>> random_inputs(int ranks, int64_t numel, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<std::vector<uint16_t>> in(static_cast<size_t>(ranks), std::vector<uint16_t>(static_cast<size_t>(numel)));
  for (auto& v : in)
    for (auto& x : v) x = f32_to_bf16(u(rng));
  return in;
}

// The contract: fp32 sum in rank order 0..N-1, rounded to bf16 once.
std::vector<uint16_t> rank_order_sum(const std::vector<std::vector<uint16_t>>& in) {
  std::vector<uint16_t> out(in[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    float acc = 0.0f;
    for (const auto& v : in) acc += bf16_to_f32(v[i]);
    out[i] = f32_to_bf16(acc);
  }
  return out;
}

void upload(RankBuffers& b, const std::vector<std::vector<uint16_t>>& in) {
  for (size_t r = 0; r < in.size(); ++r) {
    CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
    CUDA_CHECK(cudaMemcpyAsync(b.data[r], in[r].data(), in[r].size() * 2, cudaMemcpyHostToDevice, b.streams[r]));
  }
}

// Every rank's result equals `want` bit for bit.
void expect_every_rank(RankBuffers& b, const std::vector<uint16_t>& want, const std::string& what) {
  b.sync();
  for (size_t r = 0; r < b.data.size(); ++r) {
    std::vector<uint16_t> got(want.size());
    CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
    CUDA_CHECK(cudaMemcpy(got.data(), b.data[r], got.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    while (bad < got.size() && got[bad] == want[bad]) ++bad;
    EXPECT_EQ(bad, got.size()) << what << ", rank " << r << ": first mismatch at " << bad << " of " << got.size()
                               << (bad < got.size() ? ": got " + std::to_string(bf16_to_f32(got[bad])) + ", want " +
                                                          std::to_string(bf16_to_f32(want[bad]))
                                                    : "");
  }
  CUDA_CHECK(cudaSetDevice(0));
}

void all_reduce_on_every_rank(PeerAllReduce& ar, RankBuffers& b, int64_t numel) {
  for (int r = 0; r < ar.size(); ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    ar.all_reduce_sum_bf16(r, b.data[static_cast<size_t>(r)], numel, b.streams[static_cast<size_t>(r)]);
  }
  CUDA_CHECK(cudaSetDevice(0));
}

TEST(CudaPeerAllReduce, EveryRankGetsTheRankOrderSumBitForBit) {
  SKIP_WITHOUT_PEERS();
  const size_t max_bytes = size_t{4} << 20;
  PeerAllReduce ar(ranks, max_bytes);
  RankBuffers b(ranks, max_bytes);
  // One vector; a few; one CTA's worth (1024 vectors) and one more; many CTAs with a ragged last slice;
  // the 8B decode message (4096); the largest message. Repeats exercise both staging generations.
  const std::vector<int64_t> sizes = {8, 24, 4096, 8192, 8200, 4096 * 15 + 8, 1 << 20, 4096, 8, 2 << 20, 4096};
  uint32_t seed = 1;
  for (int64_t numel : sizes) {
    const auto in = random_inputs(ranks, numel, seed++);
    upload(b, in);
    all_reduce_on_every_rank(ar, b, numel);
    expect_every_rank(b, rank_order_sum(in), "numel " + std::to_string(numel));
  }
  EXPECT_FALSE(ar.fits(max_bytes / 2 + 8));
  EXPECT_FALSE(ar.fits(12));  // not a multiple of 8: the caller takes NCCL
  EXPECT_TRUE(ar.fits(max_bytes / 2));
}

TEST(CudaPeerAllReduce, BackToBackCallsWithoutHostSyncsStayInStep) {
  SKIP_WITHOUT_PEERS();
  const int64_t numel = 4096 * 3;
  PeerAllReduce ar(ranks, size_t{1} << 20);
  RankBuffers src(ranks, numel * 2), b(ranks, numel * 2);
  const auto in = random_inputs(ranks, numel, 7);
  upload(src, in);
  src.sync();
  // 301 calls of two sizes queued at once (the ranks race each other), each on a fresh copy of the inputs:
  // the last one (full size) must give the sum.
  for (int i = 0; i < 301; ++i) {
    const int64_t n = i % 3 == 0 ? numel : 4096;
    for (int r = 0; r < ranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      const size_t ri = static_cast<size_t>(r);
      CUDA_CHECK(cudaMemcpyAsync(b.data[ri], src.data[ri], numel * 2, cudaMemcpyDeviceToDevice, b.streams[ri]));
      ar.all_reduce_sum_bf16(r, b.data[ri], n, b.streams[ri]);
    }
  }
  CUDA_CHECK(cudaSetDevice(0));
  expect_every_rank(b, rank_order_sum(in), "after 301 queued calls");
}

TEST(CudaPeerAllReduce, GraphReplaysAdvanceTheGenerations) {
  SKIP_WITHOUT_PEERS();
  PeerAllReduce ar(ranks, size_t{1} << 20);
  const int64_t small = 4096, large = 40960;  // one CTA; 20 CTAs
  RankBuffers src(ranks, (small + large) * 2), dst(ranks, (small + large) * 2);
  const auto in = random_inputs(ranks, small + large, 11);
  upload(src, in);
  src.sync();
  std::vector<cudaGraphExec_t> exec(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {  // per rank: copy the inputs in, reduce the two messages
    CUDA_CHECK(cudaSetDevice(r));
    cudaStream_t st = dst.streams[static_cast<size_t>(r)];
    char* d = static_cast<char*>(dst.data[static_cast<size_t>(r)]);
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CUDA_CHECK(cudaMemcpyAsync(d, src.data[static_cast<size_t>(r)], (small + large) * 2, cudaMemcpyDeviceToDevice, st));
    ar.all_reduce_sum_bf16(r, d, small, st);
    ar.all_reduce_sum_bf16(r, d + small * 2, large, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec[static_cast<size_t>(r)], g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  for (int i = 0; i < 500; ++i) {
    for (int r = 0; r < ranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      CUDA_CHECK(cudaGraphLaunch(exec[static_cast<size_t>(r)], dst.streams[static_cast<size_t>(r)]));
    }
    if (i == 250) all_reduce_on_every_rank(ar, dst, 8);  // an eager call between replays (one generation)
  }
  std::vector<std::vector<uint16_t>> small_in, large_in;
  for (const auto& v : in) {
    small_in.emplace_back(v.begin(), v.begin() + small);
    large_in.emplace_back(v.begin() + small, v.end());
  }
  std::vector<uint16_t> want = rank_order_sum(small_in);
  const std::vector<uint16_t> want_large = rank_order_sum(large_in);
  want.insert(want.end(), want_large.begin(), want_large.end());
  expect_every_rank(dst, want, "after 500 graph replays");
  for (int r = 0; r < ranks; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaGraphExecDestroy(exec[static_cast<size_t>(r)]));
  }
  CUDA_CHECK(cudaSetDevice(0));
}

// The fused all-reduce + residual add + RMSNorm: the residual bit for bit the CPU's (rank-order fp32 sum
// rounded to bf16, plus the residual in fp32, rounded), x within one bf16 rounding of the CPU's norm
// (rsqrtf), the same bits on every rank, and within one bf16 ulp of the unfused GPU path
// (all_reduce_sum_bf16 then ops::add_rms_norm) on rank 0 (its sum of squares may add in another order). Rows from one to more than one per CTA (64 CTAs), hidden sizes of
// the 8B and 32B shapes and small odd ones.
TEST(CudaPeerAllReduce, FusedAddRmsNormMatchesTheUnfusedPath) {
  SKIP_WITHOUT_PEERS();
  const size_t max_bytes = size_t{4} << 20;
  PeerAllReduce ar(ranks, max_bytes);
  const float eps = 1e-6f;
  uint32_t seed = 100;
  for (const int64_t hidden : {4096, 5120, 64, 136}) {
    for (const int64_t rows : {1, 3, 17, 64, 65, 129}) {
      const int64_t n = rows * hidden;
      const std::string what = std::to_string(rows) + " x " + std::to_string(hidden);
      const auto x_in = random_inputs(ranks, n, seed++);
      const auto res_in = random_inputs(1, n, seed++)[0];
      const auto w_in = random_inputs(1, hidden, seed++)[0];
      // CPU reference.
      const std::vector<uint16_t> sum = rank_order_sum(x_in);
      std::vector<uint16_t> want_res(static_cast<size_t>(n));
      std::vector<float> want_x(static_cast<size_t>(n));
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          const size_t i = static_cast<size_t>(r * hidden + c);
          want_res[i] = f32_to_bf16(bf16_to_f32(res_in[i]) + bf16_to_f32(sum[i]));
          ss += static_cast<double>(bf16_to_f32(want_res[i])) * bf16_to_f32(want_res[i]);
        }
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
        for (int64_t c = 0; c < hidden; ++c) {
          const size_t i = static_cast<size_t>(r * hidden + c);
          want_x[i] = static_cast<float>(bf16_to_f32(w_in[static_cast<size_t>(c)]) * bf16_to_f32(want_res[i]) * scale);
        }
      }
      // Fused, every rank (each with its own copy of the residual and the weight).
      RankBuffers x(ranks, static_cast<size_t>(n) * 2), res(ranks, static_cast<size_t>(n) * 2),
          w(ranks, static_cast<size_t>(hidden) * 2);
      upload(x, x_in);
      upload(res, std::vector<std::vector<uint16_t>>(static_cast<size_t>(ranks), res_in));
      upload(w, std::vector<std::vector<uint16_t>>(static_cast<size_t>(ranks), w_in));
      w.sync();
      res.sync();
      for (int r = 0; r < ranks; ++r) {
        CUDA_CHECK(cudaSetDevice(r));
        const size_t ri = static_cast<size_t>(r);
        ar.all_reduce_add_rms_norm_bf16(r, x.data[ri], res.data[ri], w.data[ri], rows, hidden, eps, x.streams[ri]);
      }
      CUDA_CHECK(cudaSetDevice(0));
      x.sync();  // the kernels ran on x's streams
      expect_every_rank(res, want_res, what + " residual");
      std::vector<uint16_t> got0(static_cast<size_t>(n));
      CUDA_CHECK(cudaMemcpy(got0.data(), x.data[0], got0.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got0.size(); ++i) {
        const float tol = 8e-3f * std::fabs(want_x[i]) + 1e-5f;  // a bf16 rounding (2^-8) and rsqrtf's error
        ASSERT_NEAR(bf16_to_f32(got0[i]), want_x[i], tol) << what << ", element " << i;
      }
      expect_every_rank(x, got0, what + " x on every rank");
      // Unfused on rank 0: all_reduce_sum_bf16 then ops::add_rms_norm on fresh copies.
      RankBuffers x2(ranks, static_cast<size_t>(n) * 2), res2(ranks, static_cast<size_t>(n) * 2);
      upload(x2, x_in);
      upload(res2, std::vector<std::vector<uint16_t>>(static_cast<size_t>(ranks), res_in));
      res2.sync();
      all_reduce_on_every_rank(ar, x2, n);
      x2.sync();
      CUDA_CHECK(cudaSetDevice(0));
      const auto view = [&](void* p, Shape sh) { return TensorView(p, DType::kBF16, sh, Device::cuda(0)); };
      ops::add_rms_norm(view(x2.data[0], Shape{rows, hidden}), view(res2.data[0], Shape{rows, hidden}),
                        view(w.data[0], Shape{hidden}), eps, cuda_test::on(x2.streams[0]));
      CUDA_CHECK(cudaStreamSynchronize(x2.streams[0]));
      std::vector<uint16_t> unfused(static_cast<size_t>(n));
      CUDA_CHECK(cudaMemcpy(unfused.data(), x2.data[0], unfused.size() * 2, cudaMemcpyDeviceToHost));
      size_t bad = 0;  // same sign, bit patterns at most one apart
      while (bad < unfused.size() && (unfused[bad] ^ got0[bad]) < 0x8000 && std::abs(unfused[bad] - got0[bad]) <= 1)
        ++bad;
      EXPECT_EQ(bad, unfused.size()) << what << ": fused and unfused differ by more than one ulp first at " << bad;
    }
  }
}

// Rank 0 calls, its peers never do: the kernel waits until abort(), then returns (no hang).
TEST(CudaPeerAllReduce, AbortReleasesARankWhosePeersNeverCome) {
  SKIP_WITHOUT_PEERS();
  PeerAllReduce ar(ranks, size_t{1} << 20);
  RankBuffers b(ranks, size_t{1} << 20);
  upload(b, random_inputs(ranks, 4096, 3));
  b.sync();
  CUDA_CHECK(cudaSetDevice(0));
  ar.all_reduce_sum_bf16(0, b.data[0], 4096, b.streams[0]);
  const auto wait_done = [&](std::chrono::milliseconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(b.streams[0]) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() - t0 > limit) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  };
  EXPECT_FALSE(wait_done(std::chrono::milliseconds(200))) << "rank 0 finished without its peers";
  ar.abort();
  EXPECT_TRUE(wait_done(std::chrono::milliseconds(10'000))) << "abort() did not release rank 0";
  CUDA_CHECK(cudaStreamSynchronize(b.streams[0]));
}

// Timing only: the peer kernel against NCCL's all-reduce, bf16, eager, for message sizes from a bs=1 8B
// decode step (8 KiB) to a prefill chunk (32 MiB), to choose the peer path's limit
// (runner/cuda/cuda_tensor_parallel.cpp). Run with --gtest_also_run_disabled_tests
// --gtest_filter='CudaPeerAllReduceBench.*'.
TEST(CudaPeerAllReduceBench, DISABLED_PeerVersusNccl) {
  SKIP_WITHOUT_PEERS();
  const size_t max_bytes = size_t{32} << 20;
  NcclGroup nccl(ranks, 0);  // NCCL only
  PeerAllReduce ar(ranks, max_bytes);
  RankBuffers b(ranks, max_bytes);
  upload(b, random_inputs(ranks, static_cast<int64_t>(max_bytes / 2), 5));
  std::vector<cudaEvent_t> e0(static_cast<size_t>(ranks)), e1(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaEventCreate(&e0[static_cast<size_t>(r)]));
    CUDA_CHECK(cudaEventCreate(&e1[static_cast<size_t>(r)]));
  }
  const auto time_us = [&](int64_t numel, bool peer) {
    constexpr int kReps = 200;
    for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up
      for (int r = 0; r < ranks; ++r) {
        CUDA_CHECK(cudaSetDevice(r));
        cudaStream_t st = b.streams[static_cast<size_t>(r)];
        CUDA_CHECK(cudaEventRecord(e0[static_cast<size_t>(r)], st));
      }
      for (int i = 0; i < kReps; ++i) {
        for (int r = 0; r < ranks; ++r) {
          CUDA_CHECK(cudaSetDevice(r));
          cudaStream_t st = b.streams[static_cast<size_t>(r)];
          TensorView v(b.data[static_cast<size_t>(r)], DType::kBF16, Shape{numel}, Device::cuda(r));
          if (peer) ar.all_reduce_sum_bf16(r, v.data(), numel, st);
          else {
            if (r == 0) NCCL_CHECK(ncclGroupStart());
            nccl.rank(r)->all_reduce_sum(v, ops::Stream{st, nullptr});
            if (r == ranks - 1) NCCL_CHECK(ncclGroupEnd());
          }
        }
      }
      for (int r = 0; r < ranks; ++r) {
        CUDA_CHECK(cudaSetDevice(r));
        CUDA_CHECK(cudaEventRecord(e1[static_cast<size_t>(r)], b.streams[static_cast<size_t>(r)]));
      }
      b.sync();
    }
    float ms = 0;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0[0], e1[0]));
    return 1000.0 * ms / kReps;
  };
  for (int64_t bytes = 8 << 10; bytes <= static_cast<int64_t>(max_bytes); bytes *= 2) {
    const double p = time_us(bytes / 2, true), n = time_us(bytes / 2, false);
    std::printf("all-reduce %2d ranks %9lld bytes: peer %8.2f us, nccl %8.2f us (eager, back to back)\n", ranks,
                static_cast<long long>(bytes), p, n);
  }
  for (int r = 0; r < ranks; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaEventDestroy(e0[static_cast<size_t>(r)]));
    CUDA_CHECK(cudaEventDestroy(e1[static_cast<size_t>(r)]));
  }
  CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace
}  // namespace nanovllm
