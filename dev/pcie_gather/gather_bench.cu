// Playground: how fast can selected KV pages move host -> device? (issue #30, offload sparse decode)
// Compares, for the same selected (head, page) pieces of one layer's K (128K tokens, Hk 8, D 128, bf16):
//   memcpy   one cudaMemcpyAsync of the same byte count, contiguous (the DMA floor)
//   tok      gather kernel over mapped pinned memory, token-major host [T, Hk, D]: a piece = ps rows of 256 B
//   head     gather kernel, head-major host [Hk, T, D]: a piece = ps x 256 B contiguous
//   pieces   one cudaMemcpyAsync per piece (head-major)
// Usage: gather_bench   (prints one line per variant)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <random>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int T = 131072, HK = 8, D = 128;

// One CTA per piece group; each warp copies rows: lanes 0..15 row r, 16..31 row r+1 (16 B each).
template <int UNROLL>
__global__ void gather_tok(uint4* __restrict__ dst, const uint4* __restrict__ src, const int* __restrict__ pages,
                           int npieces, int ps) {
  // piece i = (h = i / K, page), rows p*ps .. p*ps+ps, head h: uint4 index ((t*HK + h)*D*2)/16
  const int rows_total = npieces * ps;        // (piece, row) pairs
  const int chunks_per_row = D * 2 / 16;      // 16
  const int total = rows_total * chunks_per_row;
  int idx = blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
  uint4 buf[UNROLL];
  size_t off[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    int i = idx + u * blockDim.x;
    if (i < total) {
      int c = i % chunks_per_row, pr = i / chunks_per_row, piece = pr / ps, r = pr % ps;
      int h = pages[2 * piece], p = pages[2 * piece + 1];
      size_t t = size_t(p) * ps + r;
      off[u] = (t * HK + h) * chunks_per_row + c;
      buf[u] = src[off[u]];
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    int i = idx + u * blockDim.x;
    if (i < total) dst[off[u]] = buf[u];
  }
}

template <int UNROLL>
__global__ void gather_head(uint4* __restrict__ dst, const uint4* __restrict__ src, const int* __restrict__ pages,
                            int npieces, int ps) {
  const int chunks_per_row = D * 2 / 16;
  const int total = npieces * ps * chunks_per_row;
  int idx = blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
  uint4 buf[UNROLL];
  size_t off[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    int i = idx + u * blockDim.x;
    if (i < total) {
      int piece_chunks = ps * chunks_per_row;
      int piece = i / piece_chunks, w = i % piece_chunks;
      int h = pages[2 * piece], p = pages[2 * piece + 1];
      off[u] = (size_t(h) * T + size_t(p) * ps) * chunks_per_row + w;
      buf[u] = src[off[u]];
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    int i = idx + u * blockDim.x;
    if (i < total) dst[off[u]] = buf[u];
  }
}

int main() {
  const size_t bytes = size_t(T) * HK * D * 2;
  void *host, *dev;
  CK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  CK(cudaMalloc(&dev, bytes));
  for (size_t i = 0; i < bytes / 8; ++i) static_cast<uint64_t*>(host)[i] = i * 0x9E3779B97F4A7C15ull;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::mt19937 rng(1);
  for (int ps : {16, 32, 64}) for (int budget : {2048, 4096}) {
    const int K = budget / ps, P = T / ps;
    std::vector<int> pages;
    for (int h = 0; h < HK; ++h) {
      std::vector<int> all(P);
      for (int i = 0; i < P; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + K);
      for (int k = 0; k < K; ++k) { pages.push_back(h); pages.push_back(all[k]); }
    }
    const int npieces = HK * K;
    int* dpages;
    CK(cudaMalloc(&dpages, pages.size() * 4));
    CK(cudaMemcpy(dpages, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
    const size_t moved = size_t(npieces) * ps * D * 2;
    auto timeit = [&](const char* name, auto&& fn) {
      for (int w = 0; w < 3; ++w) fn();
      cudaEventRecord(a);
      const int reps = 20;
      for (int r = 0; r < reps; ++r) fn();
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      cudaError_t e = cudaGetLastError();
      printf("ps %3d budget %5d %-22s %8.1f us  %6.1f GB/s  %s\n", ps, budget, name, ms * 1000 / reps,
             moved / (ms / reps * 1e-3) / 1e9, e == cudaSuccess ? "" : cudaGetErrorString(e));
    };
    timeit("memcpy", [&] { cudaMemcpyAsync(dev, host, moved, cudaMemcpyHostToDevice); });
    const int total = npieces * ps * 16;
    for (int threads : {256, 512}) {
      char name[64];
      snprintf(name, sizeof name, "tok u4 t%d", threads);
      timeit(name, [&] { gather_tok<4><<<(total + threads * 4 - 1) / (threads * 4), threads>>>((uint4*)dev, (const uint4*)host, dpages, npieces, ps); });
      snprintf(name, sizeof name, "tok u8 t%d", threads);
      timeit(name, [&] { gather_tok<8><<<(total + threads * 8 - 1) / (threads * 8), threads>>>((uint4*)dev, (const uint4*)host, dpages, npieces, ps); });
      snprintf(name, sizeof name, "head u4 t%d", threads);
      timeit(name, [&] { gather_head<4><<<(total + threads * 4 - 1) / (threads * 4), threads>>>((uint4*)dev, (const uint4*)host, dpages, npieces, ps); });
      snprintf(name, sizeof name, "head u8 t%d", threads);
      timeit(name, [&] { gather_head<8><<<(total + threads * 8 - 1) / (threads * 8), threads>>>((uint4*)dev, (const uint4*)host, dpages, npieces, ps); });
    }
    timeit("pieces memcpy", [&] {
      for (int i = 0; i < npieces; ++i) {
        size_t off = (size_t(pages[2 * i]) * T + size_t(pages[2 * i + 1]) * ps) * D * 2;
        cudaMemcpyAsync((char*)dev + off, (char*)host + off, size_t(ps) * D * 2, cudaMemcpyHostToDevice);
      }
    });
    cudaFree(dpages);
  }
  return 0;
}
