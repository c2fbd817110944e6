// SocketCommunicator (ranks in several processes; here threads with real sockets: socket pairs and TCP on
// loopback): all_reduce_sum gives every rank bitwise the ThreadCommunicator's rank-order sum, all_gather the
// rank-ordered concatenation; mismatched sizes throw on every rank; abort() and a vanished peer wake a
// waiting rank with an error instead of a hang.
#include "nanovllm/parallel/socket_communicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "nanovllm/core/error.h"
#include "parallel/communicator_test_util.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

// n ranks, rank 0's links to ranks 1..n-1: socket pairs, except rank n-1's, which goes over TCP.
std::vector<std::unique_ptr<SocketCommunicator>> make_group(int n) {
  std::vector<Socket> root_links;
  std::vector<std::vector<Socket>> rank_links(static_cast<size_t>(n));
  for (int r = 1; r < n; ++r) {
    if (r == n - 1 && n > 2) {
      Listener listener("127.0.0.1", 0);
      std::thread connect([&] { rank_links[static_cast<size_t>(r)].push_back(connect_to("127.0.0.1", listener.port(), std::chrono::seconds(5))); });
      root_links.push_back(listener.accept(std::chrono::seconds(5)));
      connect.join();
    } else {
      auto [a, b] = Socket::pair("rank " + std::to_string(r), "rank 0");
      root_links.push_back(std::move(a));
      rank_links[static_cast<size_t>(r)].push_back(std::move(b));
    }
  }
  std::vector<std::unique_ptr<SocketCommunicator>> comms;
  comms.push_back(std::make_unique<SocketCommunicator>(0, n, std::move(root_links)));
  for (int r = 1; r < n; ++r)
    comms.push_back(std::make_unique<SocketCommunicator>(r, n, std::move(rank_links[static_cast<size_t>(r)])));
  return comms;
}

// Runs body(rank) on one thread per rank; a rank that throws aborts its communicator (closing its sockets,
// which wakes the others). Returns each rank's error ("" when none).
std::vector<std::string> run_ranks(std::vector<std::unique_ptr<SocketCommunicator>>& comms,
                                   const std::function<void(SocketCommunicator&)>& body) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        comms[r]->abort();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

using testing::random_floats;
using testing::view;

TEST(SocketCommunicator, AllReduceAndAllGatherMatchTheRankOrderedSerialResults) {
  for (int n : {2, 3, 4}) {
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{40099}}) {
      std::vector<std::vector<float>> data;
      for (int r = 0; r < n; ++r) data.push_back(random_floats(count, static_cast<uint32_t>(100 * n + r + count)));
      std::vector<float> sum(static_cast<size_t>(count), 0.f), gathered;
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < count; ++i) sum[i] += data[r][i];
        gathered.insert(gathered.end(), data[r].begin(), data[r].end());
      }
      auto comms = make_group(n);
      std::vector<std::vector<float>> reduced(static_cast<size_t>(n)), all(static_cast<size_t>(n));
      const auto errors = run_ranks(comms, [&](SocketCommunicator& c) {
        const size_t r = static_cast<size_t>(c.rank());
        for (int rep = 0; rep < 3; ++rep) {  // back to back: messages stay in order
          reduced[r] = data[r];
          c.all_reduce_sum(view(reduced[r]));
          all[r].assign(gathered.size(), 0.f);
          std::vector<float> mine = data[r];
          c.all_gather(view(mine), view(all[r]));
        }
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(errors[r], "") << "rank " << r;
        EXPECT_EQ(reduced[r], sum) << "n " << n << " count " << count << " rank " << r;  // bitwise
        EXPECT_EQ(all[r], gathered) << "n " << n << " count " << count << " rank " << r;
      }
    }
  }
}

TEST(SocketCommunicator, DifferentSizesFailOnEveryRank) {
  auto comms = make_group(3);
  const auto errors = run_ranks(comms, [](SocketCommunicator& c) {
    std::vector<float> x(c.rank() == 2 ? 5 : 4, 1.f);
    c.all_reduce_sum(view(x));
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("all_reduce_sum: rank 0 has 16 bytes, rank 2 20"), std::string::npos) << errors[r];
}

TEST(SocketCommunicator, AbortAndAVanishedPeerWakeWaitingRanks) {
  {  // rank 1 never joins the collective and aborts: rank 0, waiting for it, throws
    auto comms = make_group(2);
    std::thread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comms[1]->abort();
    });
    std::vector<float> x(8, 1.f);
    testing::expect_error([&] { comms[0]->all_reduce_sum(view(x)); }, {"rank 1"});
    late.join();
  }
  {  // rank 0 goes away: rank 1, waiting for the result, throws
    auto comms = make_group(2);
    std::vector<float> x(8, 1.f);
    std::thread gone([&] { comms[0].reset(); });
    gone.join();
    testing::expect_error([&] { comms[1]->all_reduce_sum(view(x)); }, {"rank 0"});
  }
}

}  // namespace
}  // namespace nanovllm
