// TensorParallelRunner and RankThreads with stand-in ranks that talk through a ThreadCommGroup: the step
// reaches every rank on its own thread and rank 0's tokens come back; a rank that fails mid-step (while
// the others wait in a collective) makes the step throw that rank's error instead of hanging, and the
// group stays failed; a rank that cannot be built fails the constructor. (The real CPU ranks are tested
// end to end in tests/e2e/tensor_parallel_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/parallel/rank_threads.h"
#include "nanovllm/runner/tensor_parallel_runner.h"
#include "nanovllm/parallel/thread_communicator.h"

namespace nanovllm {
namespace {

// Adds its rank + 1 over the group twice per step; rank 0 returns the sum as a token. `fail_rank` throws
// between the two all-reduces on step `fail_step`, so the other ranks are blocked in the second one.
class StandInRank final : public ModelRunner {
 public:
  StandInRank(std::shared_ptr<ThreadCommGroup> group, int rank, int fail_rank, int fail_step)
      : comm_(std::move(group), rank), fail_rank_(fail_rank), fail_step_(fail_step) {}
  int64_t num_kv_blocks() const override { return 100 - comm_.rank(); }
  std::vector<SampledToken> execute(const SchedulerOutput&) override {
    float x = static_cast<float>(comm_.rank() + 1);
    comm_.all_reduce_sum(TensorView(&x, DType::kF32, Shape{1}));
    NANOVLLM_CHECK(!(comm_.rank() == fail_rank_ && step_ == fail_step_), "rank ", comm_.rank(), " broke on step ",
                   step_);
    float y = 1.0f;
    comm_.all_reduce_sum(TensorView(&y, DType::kF32, Shape{1}));
    ++step_;
    if (comm_.rank() != 0) return {};
    SampledToken t;
    t.token_id = static_cast<int32_t>(x + y);
    return {t};
  }

 private:
  ThreadCommunicator comm_;
  int fail_rank_, fail_step_;
  int step_ = 0;
};

std::unique_ptr<TensorParallelRunner> stand_in_group(int size, int fail_rank, int fail_step, bool ranks_launch = false) {
  auto group = std::make_shared<ThreadCommGroup>(size);
  return std::make_unique<TensorParallelRunner>(
      size, [&](int r) { return std::make_unique<StandInRank>(group, r, fail_rank, fail_step); },
      [group] { group->abort(); }, group, ranks_launch);
}

TEST(RankThreads, RunsEveryRankOnItsOwnThreadWithRankZeroOnTheCaller) {
  for (int size : {1, 2, 4}) {
    RankThreads threads(size, nullptr);
    for (int round = 0; round < 3; ++round) {
      std::mutex mu;
      std::vector<std::thread::id> ids(static_cast<size_t>(size));
      std::atomic<int> calls{0};
      threads.run([&](int r) {
        std::lock_guard lock(mu);
        ids[static_cast<size_t>(r)] = std::this_thread::get_id();
        ++calls;
      });
      EXPECT_EQ(calls.load(), size);
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), static_cast<size_t>(size));
    }
  }
}

TEST(TensorParallelRunner, EveryRankRunsTheStepAndRankZeroAnswers) {
  for (int size : {1, 2, 3, 4}) {
    auto runner = stand_in_group(size, -1, -1);
    EXPECT_EQ(runner->num_kv_blocks(), 100 - (size - 1));  // the smallest rank's
    const int sum = size * (size + 1) / 2 + size;          // sum of rank + 1, plus N ones
    for (int step = 0; step < 3; ++step) {
      const std::vector<SampledToken> t = runner->execute(SchedulerOutput{});
      ASSERT_EQ(t.size(), 1u);
      EXPECT_EQ(t[0].token_id, sum);
    }
  }
}

TEST(TensorParallelRunner, StartRunsOnEveryRankOnceAllAreBuilt) {
  auto group = std::make_shared<ThreadCommGroup>(3);
  std::atomic<int> built{0}, started{0}, started_early{0};
  TensorParallelRunner runner(
      3,
      [&](int r) -> std::unique_ptr<ModelRunner> {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));  // ranks finish at different times
        ++built;
        return std::make_unique<StandInRank>(group, r, -1, -1);
      },
      [group] { group->abort(); }, group, false,
      [&](ModelRunner& rank) {
        if (built.load() != 3) ++started_early;
        ++started;
        rank.execute(SchedulerOutput{});  // collectives: every rank takes part
      });
  EXPECT_EQ(started.load(), 3);
  EXPECT_EQ(started_early.load(), 0);
}

TEST(TensorParallelRunner, LaunchedStepsFanOutWhenTheRanksLaunch) {
  // Two steps in flight on every rank (each rank's own queue), then waited for in order.
  auto runner = stand_in_group(3, -1, -1, /*ranks_launch=*/true);
  runner->launch(SchedulerOutput{}, false);
  runner->launch(SchedulerOutput{}, false);
  for (int i = 0; i < 2; ++i) {
    const std::vector<SampledToken> t = runner->wait_oldest();
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].token_id, 6 + 3);
  }
  EXPECT_THROW(runner->wait_oldest(), Error);  // nothing launched: every rank says so
  EXPECT_THROW(runner->execute(SchedulerOutput{}), Error);  // and the group stays failed
}

TEST(TensorParallelRunner, ARankFailingMidStepIsTheStepsErrorNotAHang) {
  for (int fail_rank : {0, 1, 2}) {
    SCOPED_TRACE(fail_rank);
    auto runner = stand_in_group(3, fail_rank, 1);
    EXPECT_EQ(runner->execute(SchedulerOutput{}).size(), 1u);  // step 0 works
    try {
      runner->execute(SchedulerOutput{});
      ADD_FAILURE() << "step 1 did not throw";
    } catch (const Error& e) {
      // The cause, not another rank's "aborted".
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(fail_rank) + " broke on step 1"),
                std::string::npos)
          << e.what();
    }
    try {
      runner->execute(SchedulerOutput{});
      ADD_FAILURE() << "a failed group ran another step";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("failed in an earlier step"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("broke on step 1"), std::string::npos) << e.what();
    }
  }
}

TEST(RankThreads, AStuckGroupTimesOutIntoAnErrorInsteadOfHanging) {
  // Rank 1 waits in an all-reduce rank 0 never joins (an unmatched collective): the watchdog aborts the
  // group, rank 1's collective throws, and run() throws the timeout, not rank 1's "aborted".
  auto group = std::make_shared<ThreadCommGroup>(2);
  ThreadCommunicator rank1(group, 1);
  RankThreads threads(2, [group] { group->abort(); }, std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    threads.run([&](int r) {
      if (r == 0) return;
      float x = 1.0f;
      rank1.all_reduce_sum(TensorView(&x, DType::kF32, Shape{1}));
    });
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not finish within 200 ms"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  // A step that finishes in time is not touched by the watchdog.
  RankThreads ok(2, [group] { group->abort(); }, std::chrono::milliseconds(5000));
  std::atomic<int> calls{0};
  ok.run([&](int) { ++calls; });
  EXPECT_EQ(calls.load(), 2);
}

TEST(TensorParallelRunner, ARankThatCannotBeBuiltFailsTheConstructor) {
  auto group = std::make_shared<ThreadCommGroup>(3);
  try {
    TensorParallelRunner runner(
        3,
        [&](int r) -> std::unique_ptr<ModelRunner> {
          NANOVLLM_CHECK(r != 2, "rank ", r, " cannot be built");
          return std::make_unique<StandInRank>(group, r, -1, -1);
        },
        [group] { group->abort(); }, group);
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 cannot be built"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
