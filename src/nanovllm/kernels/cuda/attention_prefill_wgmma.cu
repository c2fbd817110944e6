// Hopper (sm_90a) prefill / mixed-batch paged attention with wgmma, head_dim 64 and 128.
//
// Same contract and tile mapping as attention_prefill_tc.cu (the mma.sync kernel, kept for sm_80/89 and
// as the fallback): items = (query row, head of one GQA group) pairs packed along M, keys gathered row by
// row through the block table with 16-byte cp.async (any block size), device-side CTA -> (sequence, query
// tile) mapping over cu_seqlens with the heaviest tiles first, causal with the prefix offset
// (position = ctx - qlen + row).
//
// CTA = 2 warpgroups (256 threads) = 128 items; warpgroup w owns items [64w, 64w + 64). Key tiles of 128.
// Per tile and warpgroup:
//   S = Q K^T   8 (D 128) or 4 (D 64) x wgmma m64n128k16, A = Q and B = K both from shared memory
//               (K-major, 128-byte swizzle);
//   softmax     online, base 2, in registers (the accumulator layout is mma.sync's C layout per warp);
//   O += P V    P re-packed to bf16 in registers as the A operand (accumulator layout == A fragment
//               layout), 8 x wgmma m64n{D}k16 with B = V from shared memory (MN-major: dims contiguous,
//               trans-b), O accumulators (64 x D per warpgroup) in registers.
// Shared memory, every operand tile in the canonical 128-byte-swizzle layout: 64-element (128-byte) rows,
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms of 1024 bytes, D 128 split into two
// 64-column halves. Q: [2 wg][D/64 halves][64 rows][128 B]; K, V: [2 stages][D/64 halves][128 keys][128 B].
// Pipeline: 2 K/V stages; tile j+1 is gathered (all 256 threads, cp.async) while tile j is computed.
// A warpgroup skips the tiles past its own last query position (causal early exit) and, in a CTA with
// fewer items than 128 (decode tokens in a mixed batch), warpgroup 1 skips every tile.
//
// Key sources (the kSparse template switch): dense, the causal keys 0..last of the CTA's sequence in order
// (paged_attention); block-sparse, the key stream of one (KV head, query block) list (block_sparse_tiles.cuh:
// block-aligned query tiles, tiles of 128 listed-block positions or columns, each key's position in a
// shared table for the causal mask). Everything else is the same code.
// Dual Chunk Attention (the kDca switch): the same loop; the Q tile holds each item's rotation for the key chunk
// being read and is reloaded at the (at most 3) chunk starts that change one, so one online softmax covers the
// three partial attentions vLLM merges by their log-sum-exps. With block-sparse keys (kSparse and kDca) the key
// stream is regrouped by region, each region starting a key tile (SparseKeysDca), and the Q tile is reloaded
// where the region changes (at most twice).
//
// fp8 KV cache (the kFp8 switch, dense or block-sparse keys, no Dual Chunk Attention; kv_fp8.cuh): tile j+1's codes
// and row scales (gathered through the same slot tables) stream by cp.async into a staging area while tile j is
// computed; at the top of tile j+1's iteration all threads rewrite them as bf16(code x
// scale) into the K / V stage in the swizzled layout (the SIMT and mma.sync kernels' values), then the MMAs are the
// bf16 kernel's. The dequantization is not overlapped with the MMAs (one CTA per SM).
//
// Resources (D 128): 160 KB + 2 KB shared memory (+ 1.5 KB sparse, + 33 KB fp8 staging: 196.5 KB at most) -> 1 CTA
// per SM, 255-register cap (256 threads; dense 212 registers, sparse 224, fp8 223, sparse fp8 238, no spills).

#include <algorithm>
#include <type_traits>

#include "nanovllm/kernels/cuda/attention_softmax.cuh"
#include "nanovllm/kernels/cuda/attention_tiles.cuh"
#include "nanovllm/kernels/cuda/block_sparse_tiles.cuh"
#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/cuda/wgmma.cuh"

namespace nanovllm::cuda_ops::attn {
namespace {

constexpr int kWgs = 2;               // consumer warpgroups per CTA
constexpr int kThreads = 128 * kWgs;
constexpr int kBM = 64 * kWgs;        // items per CTA
constexpr int kBN = 128;              // keys per tile

template <int D, bool kSparse = false, bool kFp8 = false>
struct WgCfg {
  static constexpr int kQBytes = 64 * D * 2;          // per warpgroup
  static constexpr int kKvBytes = kBN * D * 2;        // one K (or V) tile
  // fp8: the next tile's K and V codes [2][128][D] and row scales [2][128] f32
  static constexpr size_t kStagingBytes = kFp8 ? size_t{2} * kBN * (D + 4) : 0;
  // Q, 2 x K, 2 x V, 2 slot tables, (sparse: 3 key-position tables), (fp8: staging), + 1 KB so the tiles can be
  // aligned to the 1024-byte swizzle atom
  static constexpr size_t kSmem = size_t{kWgs} * kQBytes + size_t{4} * kKvBytes + size_t{2} * kBN * 4 +
                                  (kSparse ? size_t{3} * kBN * 4 : 0) + kStagingBytes + 1024;
};

#ifdef NANOVLLM_WGMMA_DEVICE
constexpr int kHalfRowsBytes = 128;  // bytes per swizzled row (64 bf16)
template <int D, bool kFp8 = false>
struct WgDev : WgCfg<D, false, kFp8> {
  static constexpr int kHalfBytes = kBN * kHalfRowsBytes;  // one 64-column half of a K/V tile
  static constexpr int kChunks = D / 8;                    // 16-byte chunks per row
  static constexpr int kKvPasses = kBN * kChunks / kThreads;
  static constexpr int kQPasses = kBM * kChunks / kThreads;
  // fp8: 16-byte code copies (D / 16 per row) per thread per K (or V) tile, and 8-code chunks dequantized
  static constexpr int kCodeChunks = D / 16;
  static constexpr int kCodePasses = kBN * kCodeChunks / kThreads;
  static constexpr int kDequantPasses = kBN * kChunks / kThreads;
};

// Byte offset of 16-byte chunk `c` (of D/8) in row `r` of a swizzled [rows][D] tile whose 64-column halves
// are `half_bytes` apart.
__device__ __forceinline__ int swz(int r, int c, int half_bytes) {
  return (c >> 3) * half_bytes + r * kHalfRowsBytes + (((c & 7) ^ (r & 7)) << 4);
}

// d += A[64x16] (registers, bf16x2) * B[16x128] (shared, MN-major: N contiguous, trans-b = 1).
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// d += A[64x16] (registers, bf16x2) * B[16x64] (shared, MN-major: N contiguous, trans-b = 1).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

template <int D> struct PvMma;
template <> struct PvMma<128> {
  static __device__ __forceinline__ void run(float (&o)[64], const uint32_t (&a)[4], uint64_t db) {
    wgmma_rs_n128(o, a, db);
  }
};
template <> struct PvMma<64> {
  static __device__ __forceinline__ void run(float (&o)[32], const uint32_t (&a)[4], uint64_t db) {
    wgmma_rs_n64(o, a, db);
  }
};
#endif  // NANOVLLM_WGMMA_DEVICE

// sp: the pattern (kSparse only). kDca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len a multiple of
// kBN): the Q tile holds, per item, the rotation its row uses for the current key tile's chunk (dca_region) and is
// reloaded when a key tile starts a chunk that changes it (at most 3 times); sparse: when the tile's region
// (SparseKeysDca::tile_region) differs from the loaded one. kFp8: an fp8 cache (p.k_scale / p.v_scale), see the file
// comment.
template <int D, bool kSparse, bool kDca = false, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(Params p, SparsePattern sp, int rows_per_cta, int gc, int gchunks) {
  static_assert(!(kFp8 && kDca), "an fp8 cache runs without Dual Chunk Attention");
#ifdef NANOVLLM_WGMMA_DEVICE
  using C = WgDev<D, kFp8>;
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base (swizzle atoms are addressed by absolute shared-memory address bits).
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  unsigned char* qs = smem;                               // [2 wg][halves][64][128 B]
  unsigned char* ks = qs + kWgs * C::kQBytes;             // [2 stages][halves][128][128 B]
  unsigned char* vs = ks + 2 * C::kKvBytes;               // [2 stages][halves][128][128 B]
  int* slots = reinterpret_cast<int*>(vs + 2 * C::kKvBytes);  // [2][128] cache slot per key, -1 = none
  int* kpos = slots + 2 * kBN;  // sparse: [3][128] position per key of tiles t % 3 (INT_MAX: none)
  // fp8: [K | V][128 keys][D] codes, then [K | V][128] scales (after the slot tables and, sparse, the position tables)
  unsigned char* staged = reinterpret_cast<unsigned char*>(kpos + (kSparse ? 3 * kBN : 0));
  float* staged_scale = reinterpret_cast<float*>(staged + 2 * kBN * D);
  __shared__ int tile_info[2];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wwarp = warp & 3;  // warpgroup, warp within it
  const PackedUnit u = packed_unit(p, gc, gchunks);

  // CTA -> (sequence, query tile), heaviest first; none: the grid is over-provisioned.
  QueryTile qt;
  if constexpr (kSparse) {
    if (!sparse_query_tile(p, sp, u.rev, qt)) return;
  } else {
    if (!find_cta_tile<true>(p, rows_per_cta, u.rev, warp, lane, tile_info)) return;
    qt = query_tile(p, tile_info, rows_per_cta);
  }
  // Sparse: the CTA's key stream (dense: unused); with DCA regrouped by region.
  using Keys = std::conditional_t<kDca, SparseKeysDca, SparseKeys>;
  Keys keys{};
  if constexpr (kSparse && kDca) {
    keys = SparseKeysDca(sp, u.kvh, qt.pos0 / sp.block_size, p.dca_chunk_len, kBN);
  } else if constexpr (kSparse) {
    keys = SparseKeys(sp, u.kvh, qt.pos0 / sp.block_size);
  }
  const int nkeys = kSparse ? keys.entries : qt.nkeys;
  const int ntiles = nkeys > 0 ? (nkeys + kBN - 1) / kBN : 0;
  const int32_t* bt = block_table(p, qt.seq);

  // This warpgroup's query positions: items [64 wg, 64 wg + 64) -> rows [first_row, last_row].
  const int wg_first_row = (64 * wg) / gc;
  const bool wg_live = wg_first_row < qt.rows;
  const int wg_first_pos = qt.pos0 + wg_first_row;
  const int wg_last_pos = qt.pos0 + min(qt.rows - 1, (64 * wg + 63) / gc);

  // Cache slot of key `k` of `tile`, -1 past the visible keys; sparse: its position goes to `pos`.
  auto key_slot = [&](int tile, int k, int& pos) {
    const int j = tile * kBN + k;
    if constexpr (kSparse) {
      pos = keys.position(j);
      if (pos < 0) pos = INT_MAX;  // (contents are trusted; a bad entry must still not read outside the cache)
      return pos <= qt.last_pos ? paged_slot(bt, pos, p.block_size) : -1;
    }
    pos = j;
    return j < qt.nkeys ? paged_slot(bt, j, p.block_size) : -1;
  };
  const int cc = tid % C::kChunks, r_base = tid / C::kChunks;
  constexpr int kRowsPerPass = kThreads / C::kChunks;
  auto issue_kv = [&](int buf) {
#pragma unroll
    for (int k = 0; k < C::kKvPasses; ++k) {
      const int r = r_base + k * kRowsPerPass;
      const int slot = slots[buf * kBN + r];
      const int64_t off = (int64_t{slot} * p.hk + u.kvh) * D + cc * 8;
      const int dst = buf * C::kKvBytes + swz(r, cc, C::kHalfBytes);
      cp_async16_zfill(smem_u32(ks + dst), slot >= 0 ? p.k_cache + off : p.k_cache, slot >= 0);
      cp_async16_zfill(smem_u32(vs + dst), slot >= 0 ? p.v_cache + off : p.v_cache, slot >= 0);
    }
  };
  // fp8: the codes and scales of the tile whose slot table is `buf` -> the staging area (zeros past the keys).
  auto issue_codes = [&](int buf) {
    const auto* k_codes = reinterpret_cast<const uint8_t*>(p.k_cache);
    const auto* v_codes = reinterpret_cast<const uint8_t*>(p.v_cache);
    const int c16 = tid % C::kCodeChunks, r16 = tid / C::kCodeChunks;
#pragma unroll
    for (int k = 0; k < C::kCodePasses; ++k) {
      const int r = r16 + k * (kThreads / C::kCodeChunks);
      const int slot = slots[buf * kBN + r];
      const int64_t off = slot >= 0 ? (int64_t{slot} * p.hk + u.kvh) * D + c16 * 16 : 0;
      cp_async16_zfill(smem_u32(staged + r * D + c16 * 16), k_codes + off, slot >= 0);
      cp_async16_zfill(smem_u32(staged + (kBN + r) * D + c16 * 16), v_codes + off, slot >= 0);
    }
    const int r = tid % kBN, slot = slots[buf * kBN + r];  // threads 0-127: K scales, 128-255: V scales
    const int64_t row = slot >= 0 ? int64_t{slot} * p.hk + u.kvh : 0;
    cp_async4_zfill(smem_u32(staged_scale + tid), (tid < kBN ? p.k_scale : p.v_scale) + row, slot >= 0);
  };
  // fp8: the staged tile -> bf16(code x scale) in K / V stage `buf` (swizzled as issue_kv's copies).
  auto dequantize_staged = [&](int buf) {
#pragma unroll
    for (int k = 0; k < C::kDequantPasses; ++k) {
      const int e = tid + k * kThreads, r = e / C::kChunks, c = e % C::kChunks;
      const int dst = buf * C::kKvBytes + swz(r, c, C::kHalfBytes);
      *reinterpret_cast<uint4*>(ks + dst) =
          fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(staged + r * D + c * 8), staged_scale[r]);
      *reinterpret_cast<uint4*>(vs + dst) =
          fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(staged + (kBN + r) * D + c * 8), staged_scale[kBN + r]);
    }
  };

  // Slot tables of tiles 0 and 1 (threads 0-127: tile 0, 128-255: tile 1).
  {
    int pos;
    slots[tid] = key_slot(tid / kBN, tid % kBN, pos);
    if constexpr (kSparse) kpos[tid] = pos;
  }
  // Queries (zero rows for unused items): item i -> query row i / gc, head g0 + i % gc; Dual Chunk Attention:
  // the rotation the row uses for key chunk `key_chunk`.
  auto load_queries = [&](int key_chunk) {
#pragma unroll
    for (int k = 0; k < C::kQPasses; ++k) {
      const int i = r_base + k * kRowsPerPass;
      const int r = i / gc, gi = i % gc;
      const bool valid = r < qt.rows && gi < u.gcount;
      const __nv_bfloat16* q = p.q;
      if constexpr (kDca) q = dca_queries(p, dca_region(qt.pos0 + r, key_chunk, p.dca_chunk_len));
      const __nv_bfloat16* src = valid ? q + packed_row(p, qt, u, r, gi) * D + cc * 8 : p.q;
      cp_async16_zfill(smem_u32(qs + (i >> 6) * C::kQBytes + swz(i & 63, cc, 64 * kHalfRowsBytes)), src, valid);
    }
  };
  int loaded_region = 0;  // sparse DCA: the region whose rotations the Q tile holds
  if constexpr (kSparse && kDca) {
    loaded_region = ntiles > 0 ? keys.tile_region(0, kBN) : 0;
    load_queries(keys.region_chunk(loaded_region));
  } else {
    load_queries(0);
  }
  __syncthreads();  // slot tables
  if (ntiles > 0) {
    if constexpr (kFp8) issue_codes(0);
    else issue_kv(0);
  }
  cp_async_commit();

  // This thread's two items (accumulator rows): wwarp * 16 + gq (+ 8) of the warpgroup.
  const int gq = lane >> 2, tq = lane & 3;
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) lim[h] = item_key_limit(qt, 64 * wg + wwarp * 16 + gq + 8 * h, gc, u.gcount);

  constexpr int kON = D / 2;  // O accumulator registers per thread (64 x D per warpgroup / 128 threads)
  float o[kON];
#pragma unroll
  for (int i = 0; i < kON; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = p.scale_log2;
  const unsigned q_base = smem_u32(qs + wg * C::kQBytes);
  const unsigned k_base = smem_u32(ks), v_base = smem_u32(vs);

  // The key positions of the tile: [key0, key0 + 127] (dense); [lo, hi] (sparse, looked up one tile
  // ahead so the index loads overlap the MMAs), full: no empty entry.
  int lo = 0, hi = kBN - 1;
  bool full = true;
  if constexpr (kSparse)
    if (ntiles > 0) keys.tile_range(0, kBN, lo, hi, full);
  for (int tile = 0; tile < ntiles; ++tile) {
    const int buf = tile & 1;
    cp_async_wait<0>();
    if constexpr (kFp8) {
      __syncthreads();  // the tile's codes are staged (every thread's copies); stage buf's last reader (tile - 2) done
      dequantize_staged(buf);
    }
    fence_proxy_async_smem();  // this thread's cp.async (fp8: dequantized) writes -> visible to the tensor cores
    __syncthreads();      // tile landed everywhere; everyone done with tile - 1 (buffer buf ^ 1, table buf)
    if constexpr (kSparse && kDca) {
      // Key tiles of another region (the stream is grouped by region): the same reload as below.
      const int region = keys.tile_region(tile, kBN);
      if (region != loaded_region) {
        loaded_region = region;
        load_queries(keys.region_chunk(region));
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();
      }
    } else if constexpr (kDca) {
      // A key tile that starts the chunk before the first row's (inter -> successive) or one of the rows' own
      // chunks (successive -> intra): every warpgroup is done with the old Q tile (the barrier above), so it
      // is overwritten, and waited for before any MMA reads it. CTA-uniform, the barrier is safe.
      const int key0 = tile * kBN, key_chunk = key0 / p.dca_chunk_len;
      const int first_chunk = qt.pos0 / p.dca_chunk_len, last_chunk = qt.last_pos / p.dca_chunk_len;
      if (key0 > 0 && key0 % p.dca_chunk_len == 0 && key_chunk >= first_chunk - 1 && key_chunk <= last_chunk) {
        load_queries(key_chunk);
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();
      }
    }
    if (tile + 1 < ntiles) {
      if constexpr (kFp8) issue_codes(buf ^ 1);  // the staging area is free: the barrier above follows its reads
      else issue_kv(buf ^ 1);
    }
    cp_async_commit();
    // Slot table for tile + 2 (table buf is free: tile's copies were issued before the barrier);
    // looked up now, stored after the MMAs. Its positions (sparse) go to table (tile + 2) % 3, which
    // held tile - 1's (every thread is done with them).
    int next_pos = INT_MAX;
    const int next_slot = tid < kBN && tile + 2 < ntiles ? key_slot(tile + 2, tid, next_pos) : -1;
    int next_lo = 0, next_hi = 0;
    bool next_full = true;
    if constexpr (kSparse)
      if (tile + 1 < ntiles) keys.tile_range(tile + 1, kBN, next_lo, next_hi, next_full);

    const int key0 = tile * kBN;
    if constexpr (!kSparse) {
      lo = key0;
      hi = key0 + kBN - 1;
    }
    if (wg_live && lo <= wg_last_pos) {
      // S = Q K^T  [64 items x 128 keys] per warpgroup
      float s[64];
      const unsigned kb = k_base + buf * C::kKvBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da = wgmma_desc(q_base + (kk >> 2) * (64 * kHalfRowsBytes) + (kk & 3) * 32, 16, 1024);
        const uint64_t db = wgmma_desc(kb + (kk >> 2) * C::kHalfBytes + (kk & 3) * 32, 16, 1024);
        WgmmaSS<128>::run(s, da, db, kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);

      // causal diagonal / ragged end: mask keys past each row's limit
      if constexpr (kSparse) {
        if (!full || hi > wg_first_pos) mask_scores_at(s, kpos + (tile % 3) * kBN, tq, lim);
      } else {
        if (hi > wg_first_pos) mask_scores(s, key0, tq, lim);
      }

      float alpha[2];
      uint32_t pa[8][4];  // P as the A operand of 8 k-steps (16 keys each)
      online_softmax(s, sl2, m, l, alpha, pa);
      scale_rows(o, alpha);

      // O += P V: k-steps of 16 keys; V tile MN-major (lbo: 64-column halves, sbo: 8-key groups).
      const unsigned vb = v_base + buf * C::kKvBytes;
      fence_regs(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint64_t db = wgmma_desc(vb + kk * 16 * kHalfRowsBytes, C::kHalfBytes, 1024);
        PvMma<D>::run(o, pa[kk], db);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
    }
    if (tid < kBN && tile + 2 < ntiles) {
      slots[buf * kBN + tid] = next_slot;
      if constexpr (kSparse) kpos[((tile + 2) % 3) * kBN + tid] = next_pos;
    }
    if constexpr (kSparse) {
      lo = next_lo;
      hi = next_hi;
      full = next_full;
    }
  }

  // Epilogue: normalise, stage each warp's 16 rows as bf16 (swizzled, in its warpgroup's Q tile), then
  // 16-byte stores of the valid items.
  cp_async_wait<0>();
  __syncthreads();  // all wgmma reads of Q done (and, ntiles == 0, the Q copies landed)
  float inv[2];
  inv_row_sums(l, inv);
  unsigned char* stage = qs + wg * C::kQBytes;
#pragma unroll
  for (int d = 0; d < kON / 4; ++d) {  // dims 8d + 2tq, +1
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wwarp * 16 + gq + 8 * h;
      *reinterpret_cast<__nv_bfloat162*>(stage + swz(r, d, 64 * kHalfRowsBytes) + tq * 4) =
          __floats2bfloat162_rn(o[4 * d + 2 * h] * inv[h], o[4 * d + 2 * h + 1] * inv[h]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 16 * C::kChunks / 32; ++k) {
    const int c = lane + 32 * k;
    const int rl = wwarp * 16 + c / C::kChunks, ch = c % C::kChunks;
    const int i = 64 * wg + rl;
    const int r = i / gc, gi = i % gc;
    if (r < qt.rows && gi < u.gcount) {
      const uint4 v = *reinterpret_cast<const uint4*>(stage + swz(rl, ch, 64 * kHalfRowsBytes));
      *reinterpret_cast<uint4*>(p.out + packed_row(p, qt, u, r, gi) * D + ch * 8) = v;
    }
  }
#else
  __trap();  // built without sm_90a: the host never launches this (wgmma_usable() is false)
#endif
}

// The loaded binary of the kernel is sm_90a code (not a JIT of an older target's PTX, not a plain sm_90
// build): its PTX / binary versions are 90 and the device is compute capability 9.0.
template <int D, bool kSparse, bool kDca = false, bool kFp8 = false>
bool wgmma_usable(int device) {
  static PerDeviceFlag flag;
  NANOVLLM_CHECK(device >= 0 && device < PerDeviceFlag::kMaxDevices, "paged_attention (cuda): device index ", device);
  return flag.get(device, [](int dev) {
    if (!runs_sm90a_code(dev, reinterpret_cast<const void*>(prefill_wgmma_kernel<D, kSparse, kDca, kFp8>)))
      return false;
    constexpr size_t kSmem = WgCfg<D, kSparse, kFp8>::kSmem;
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (static_cast<size_t>(optin) < kSmem) return false;
    // (the dynamic shared-memory limit is a per-function attribute of the current device's context)
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<D, kSparse, kDca, kFp8>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    return true;
  });
}

template <int D, bool kDca, bool kFp8 = false>
bool launch(const Params& p, int64_t num_tokens, cudaStream_t st) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (!wgmma_usable<D, false, kDca, kFp8>(device)) return false;
  const PackedGrid g = packed_grid(p, num_tokens, kBM);
  prefill_wgmma_kernel<D, false, kDca, kFp8>
      <<<g.ctas, kThreads, WgCfg<D, false, kFp8>::kSmem, st>>>(p, SparsePattern{}, g.rows_per_cta, g.gc, g.gchunks);
  CUDA_CHECK_LAUNCH();
  return true;
}

// Block-sparse: query tiles of min(128 / gc, bs) rows, tiles_per_block of them per query block.
template <int D, bool kDca, bool kFp8 = false>
bool launch_sparse(const Params& p, SparsePattern sp, cudaStream_t st) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (!wgmma_usable<D, true, kDca, kFp8>(device)) return false;
  const int gc = p.g < kBM ? p.g : kBM;
  const int gchunks = (p.g + gc - 1) / gc;
  sp.rows_per_tile = std::min(kBM / gc, sp.block_size);
  sp.tiles_per_block = (sp.block_size + sp.rows_per_tile - 1) / sp.rows_per_tile;
  const int64_t ctas = int64_t{sp.num_query_blocks - sp.first_block} * sp.tiles_per_block * p.hk * gchunks;
  NANOVLLM_CHECK(ctas < (int64_t{1} << 31), "block_sparse_prefill_attention (cuda): grid too large (", ctas, " CTAs)");
  if (ctas == 0) return true;
  prefill_wgmma_kernel<D, true, kDca, kFp8>
      <<<static_cast<unsigned>(ctas), kThreads, WgCfg<D, true, kFp8>::kSmem, st>>>(p, sp, sp.rows_per_tile, gc,
                                                                                  gchunks);
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

bool launch_prefill_wgmma(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st, bool dca) {
  if (p.k_scale != nullptr) {  // an fp8 cache (the engine refuses it with Dual Chunk Attention)
    NANOVLLM_CHECK(!dca, "paged_attention (cuda): Dual Chunk Attention reads a bf16 KV cache, not fp8");
    switch (head_dim) {
      case 64: return launch<64, false, true>(p, num_tokens, st);
      case 128: return launch<128, false, true>(p, num_tokens, st);
      default: return false;
    }
  }
  switch (head_dim) {
    case 64: return dca ? launch<64, true>(p, num_tokens, st) : launch<64, false>(p, num_tokens, st);
    case 128: return dca ? launch<128, true>(p, num_tokens, st) : launch<128, false>(p, num_tokens, st);
    default: return false;
  }
}

bool launch_block_sparse_wgmma(const Params& p, const SparsePattern& sp, int head_dim, cudaStream_t st, bool dca) {
  if (p.k_scale != nullptr) {  // an fp8 cache (the engine refuses it with Dual Chunk Attention)
    NANOVLLM_CHECK(!dca, "block_sparse_prefill_attention (cuda): Dual Chunk Attention reads a bf16 KV cache, not fp8");
    switch (head_dim) {
      case 64: return launch_sparse<64, false, true>(p, sp, st);
      case 128: return launch_sparse<128, false, true>(p, sp, st);
      default: return false;
    }
  }
  switch (head_dim) {
    case 64: return dca ? launch_sparse<64, true>(p, sp, st) : launch_sparse<64, false>(p, sp, st);
    case 128: return dca ? launch_sparse<128, true>(p, sp, st) : launch_sparse<128, false>(p, sp, st);
    default: return false;
  }
}

}  // namespace nanovllm::cuda_ops::attn
