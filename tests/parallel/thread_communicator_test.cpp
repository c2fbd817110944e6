// ThreadCommunicator: N rank threads on fresh random data; all_reduce_sum gives every rank the sum in
// rank order (bitwise the serial sum 0 + x_0 + x_1 + ...), all_gather the rank-ordered concatenation;
// mismatched sizes throw on every rank and an aborted group wakes the others instead of hanging.
#include "nanovllm/parallel/thread_communicator.h"

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nanovllm/core/error.h"
#include "parallel/communicator_test_util.h"

using namespace nanovllm;

namespace {

// Runs body(comm) on `n` threads, one per rank; returns each rank's error message ("" when none).
std::vector<std::string> run_ranks(int n, const std::function<void(Communicator&)>& body) {
  auto group = std::make_shared<ThreadCommGroup>(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(group, r);
      try {
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        group->abort();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

using nanovllm::testing::random_floats;
using nanovllm::testing::view;

}  // namespace

TEST(ThreadCommunicator, AllReduceSumIsTheRankOrderedSumOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{4099}}) {
      std::vector<std::vector<float>> data;
      for (int r = 0; r < n; ++r) data.push_back(random_floats(count, static_cast<uint32_t>(1000 * n + 10 * r + count)));
      std::vector<float> want(static_cast<size_t>(count), 0.f);
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < count; ++i) want[i] += data[r][i];
      // Three collectives in a row reuse the barrier; each rank reduces its own copy.
      std::vector<std::vector<float>> results(static_cast<size_t>(n));
      const auto errors = run_ranks(n, [&](Communicator& c) {
        std::vector<float> mine = data[c.rank()];
        c.all_reduce_sum(view(mine));
        results[c.rank()] = mine;
        std::vector<float> again = data[c.rank()];
        c.all_reduce_sum(view(again));
        c.all_reduce_sum(view(again));  // now n * want (up to rounding), checked loosely below
        EXPECT_NEAR(again[0], n * want[0], 1e-3f * n * n * 10);
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(errors[r], "") << "n=" << n << " rank " << r;
        EXPECT_EQ(results[r], want) << "n=" << n << " count=" << count << " rank " << r;  // bitwise
      }
    }
  }
}

TEST(ThreadCommunicator, AllGatherConcatenatesInRankOrder) {
  for (int n : {1, 2, 3, 4}) {
    const int64_t count = 13;
    std::vector<std::vector<float>> data;
    std::vector<float> want;
    for (int r = 0; r < n; ++r) {
      data.push_back(random_floats(count, static_cast<uint32_t>(77 + r)));
      want.insert(want.end(), data.back().begin(), data.back().end());
    }
    std::vector<std::vector<float>> results(static_cast<size_t>(n));
    const auto errors = run_ranks(n, [&](Communicator& c) {
      std::vector<float> out(static_cast<size_t>(count * n), -1.f);
      c.all_gather(view(data[c.rank()]), view(out));
      results[c.rank()] = out;
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(errors[r], "");
      EXPECT_EQ(results[r], want) << "n=" << n << " rank " << r;
    }
  }
}

TEST(ThreadCommunicator, MismatchedSizesThrowOnEveryRank) {
  const auto errors = run_ranks(3, [&](Communicator& c) {
    std::vector<float> v = random_floats(c.rank() == 1 ? 5 : 4, 9);
    c.all_reduce_sum(view(v));
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("every rank must pass the same size"), std::string::npos) << e;
}

TEST(ThreadCommunicator, AbortWakesRanksWaitingForAFailedOne) {
  const auto errors = run_ranks(4, [&](Communicator& c) {
    if (c.rank() == 2) throw Error("rank 2 failed in its forward");
    std::vector<float> v = random_floats(8, 3);
    c.all_reduce_sum(view(v));  // would wait forever for rank 2 without abort()
  });
  EXPECT_NE(errors[2].find("rank 2 failed"), std::string::npos);
  for (int r : {0, 1, 3}) EXPECT_NE(errors[r].find("aborted"), std::string::npos) << errors[r];
}

TEST(ThreadCommunicator, RejectsBadArguments) {
  auto group = std::make_shared<ThreadCommGroup>(1);
  EXPECT_THROW(ThreadCommGroup(0), Error);
  EXPECT_THROW(ThreadCommunicator(group, 1), Error);
  ThreadCommunicator c(group, 0);
  std::vector<uint16_t> half(4, 1);
  EXPECT_THROW(c.all_reduce_sum(TensorView(half.data(), DType::kBF16, Shape{4})), Error);
  std::vector<float> in = random_floats(4, 1), out(3);
  EXPECT_THROW(c.all_gather(view(in), view(out)), Error);
}
