#include "nanovllm/parallel/socket_communicator.h"

#include <cstring>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/parallel/wire.h"

namespace nanovllm {

SocketCommunicator::SocketCommunicator(int rank, int size, std::vector<Socket> links)
    : rank_(rank), size_(size), links_(std::move(links)) {
  NANOVLLM_CHECK(rank >= 0 && rank < size, "rank ", rank, " outside [0, ", size, ")");
  NANOVLLM_CHECK(links_.size() == static_cast<size_t>(rank == 0 ? size - 1 : 1), "SocketCommunicator rank ", rank,
                 " of ", size, ": ", links_.size(), " sockets");
}

void SocketCommunicator::abort() {
  for (Socket& s : links_) s.shutdown();
}

// Each rank's message: {op, byte count} then the bytes. Rank 0's answer: {ok, error, result bytes}.
std::string SocketCommunicator::exchange(Op op, const void* data, size_t bytes) {
  Socket& root = links_[0];
  ByteWriter w;
  w.put(op);
  w.put_vector(static_cast<const char*>(data), bytes);
  root.send_frame(w.bytes());
  const std::string answer = root.recv_frame();
  ByteReader r(answer, "collective result");
  const bool ok = r.get<uint8_t>() != 0;
  const std::string error = r.get_string();
  NANOVLLM_CHECK(ok, error);
  std::string result = r.get_string();
  r.expect_done();
  return result;
}

std::vector<std::string> SocketCommunicator::gather_at_root(Op op, const void* data, size_t bytes) {
  std::vector<std::string> parts(static_cast<size_t>(size_));
  parts[0].assign(static_cast<const char*>(data), bytes);
  std::string mismatch;
  for (int r = 1; r < size_; ++r) {
    const std::string message = links_[static_cast<size_t>(r - 1)].recv_frame();
    ByteReader reader(message, "collective message");
    const Op theirs = reader.get<Op>();
    parts[static_cast<size_t>(r)] = reader.get_string();
    reader.expect_done();
    if (mismatch.empty() && (theirs != op || parts[static_cast<size_t>(r)].size() != bytes))
      mismatch = std::string(op == Op::kAllReduce ? "all_reduce_sum" : "all_gather") + ": rank 0 has " +
                 std::to_string(bytes) + " bytes, rank " + std::to_string(r) + " " +
                 std::to_string(parts[static_cast<size_t>(r)].size()) +
                 (theirs != op ? " in another collective" : "") + " (every rank must pass the same size)";
  }
  if (!mismatch.empty()) {
    ByteWriter w;
    w.put<uint8_t>(0);
    w.put_string(mismatch);
    for (Socket& s : links_) s.send_frame(w.bytes());
    NANOVLLM_FAIL(mismatch);
  }
  return parts;
}

void SocketCommunicator::answer_all(const std::string& result) {
  ByteWriter w;
  w.put<uint8_t>(1);
  w.put_string("");
  w.put_string(result);
  for (Socket& s : links_) s.send_frame(w.bytes());
}

void SocketCommunicator::all_reduce_sum(TensorView data, ops::Stream) {
  NANOVLLM_CHECK(data.dtype() == DType::kF32, "all_reduce_sum: the socket communicator sums f32, got ",
                 dtype_name(data.dtype()));
  if (rank_ != 0) {
    const std::string sum = exchange(Op::kAllReduce, data.data(), data.nbytes());
    std::memcpy(data.data(), sum.data(), sum.size());
    return;
  }
  const std::vector<std::string> parts = gather_at_root(Op::kAllReduce, data.data(), data.nbytes());
  const int64_t n = data.numel();
  std::vector<float> sum(static_cast<size_t>(n), 0.f);  // 0 + x0 + x1 + ...: ThreadCommunicator's order
  for (const std::string& part : parts) {
    const float* x = reinterpret_cast<const float*>(part.data());
    for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  std::memcpy(data.data(), sum.data(), sum.size() * sizeof(float));
  answer_all(std::string(reinterpret_cast<const char*>(sum.data()), sum.size() * sizeof(float)));
}

void SocketCommunicator::all_gather(TensorView in, TensorView out, ops::Stream) {
  NANOVLLM_CHECK(in.dtype() == out.dtype(), "all_gather: in is ", dtype_name(in.dtype()), ", out is ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(out.numel() == in.numel() * size(), "all_gather: out has ", out.numel(), " elements, expected ",
                 size(), " x ", in.numel());
  std::string all;
  if (rank_ != 0) {
    all = exchange(Op::kAllGather, in.data(), in.nbytes());
  } else {
    for (const std::string& part : gather_at_root(Op::kAllGather, in.data(), in.nbytes())) all += part;
    answer_all(all);
  }
  std::memcpy(out.data(), all.data(), all.size());
}

}  // namespace nanovllm
