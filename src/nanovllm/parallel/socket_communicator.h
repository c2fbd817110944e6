// SocketCommunicator: the CPU backend's collectives when the ranks live in several processes (a multi-node
// group, docs/tensor_parallel.md section 7; tested as processes on one host). Rank 0 holds a socket to
// every other rank; a collective sends each rank's data to rank 0, which sums in rank order 0..N-1 (the
// ThreadCommunicator's order, so the results are bitwise the same as with threads) or concatenates, and
// sends the result back. Sizes that differ between ranks are an error on every rank. abort() closes the
// sockets, so a rank waiting in a collective throws instead of hanging.
#pragma once

#include <vector>

#include "nanovllm/kernels/communicator.h"
#include "nanovllm/parallel/tcp.h"

namespace nanovllm {

class SocketCommunicator final : public Communicator {
 public:
  // Rank 0: links[r - 1] is rank r's socket; any other rank: links = {its socket to rank 0}.
  SocketCommunicator(int rank, int size, std::vector<Socket> links);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(TensorView data, ops::Stream s = {}) override;  // F32; `s` unused
  void all_gather(TensorView in, TensorView out, ops::Stream s = {}) override;
  // Closes this rank's sockets (from any thread): its pending and later collectives throw.
  void abort();

 private:
  enum class Op : uint8_t { kAllReduce = 1, kAllGather = 2 };
  // Sends `bytes` of this rank's data to rank 0 and returns rank 0's result (or throws its error).
  std::string exchange(Op op, const void* data, size_t bytes);
  // Rank 0: every rank's data in rank order (its own first); throws on every rank for a mismatch.
  std::vector<std::string> gather_at_root(Op op, const void* data, size_t bytes);
  void answer_all(const std::string& result);

  int rank_, size_;
  std::vector<Socket> links_;
};

}  // namespace nanovllm
