#include "nanovllm/core/parallel.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace nanovllm {
namespace {

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (int64_t n : {1, 2, 15, 16, 17, 129, 1000, 100003}) {
    for (int64_t grain : {1, 7, 64, 1000000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      }, grain);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ParallelFor, EmptyRangeCallsNothing) {
  int calls = 0;
  parallel_for(0, [&](int64_t, int64_t) { ++calls; });
  parallel_for(-5, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, NestedCallsRunAndCover) {
  std::atomic<int64_t> sum{0};
  parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(100, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) sum.fetch_add(i * 100 + j);
      });
  });
  // sum over i < 8, j < 100 of (100 i + j)
  EXPECT_EQ(sum.load(), 100 * 100 * 28 + 8 * 4950);
}

TEST(ParallelFor, RethrowsTheWorkersException) {
  EXPECT_THROW(parallel_for(1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      if (i == 777) throw std::runtime_error("boom");
  }), std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> count{0};
  parallel_for(1000, [&](int64_t b, int64_t e) { count += e - b; });
  EXPECT_EQ(count.load(), 1000);
}

TEST(ParallelFor, NumThreadsIsPositive) { EXPECT_GE(num_threads(), 1); }

}  // namespace
}  // namespace nanovllm
