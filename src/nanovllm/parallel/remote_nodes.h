// RemoteNodes: node 0's step channels to the other nodes of a multi-node tensor-parallel group
// (docs/tensor_parallel.md, section 7). Every runner call the engine makes is sent to every node
// (StepEncoder: only what changed) before node 0's own ranks run it; each node answers when its ranks are
// done. A reader thread per node takes the answers, so a node that fails a step or disappears aborts
// node 0's ranks at once (`abort_local`) instead of leaving them waiting in a collective.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanovllm/parallel/rendezvous.h"
#include "nanovllm/parallel/step_codec.h"
#include "nanovllm/parallel/tcp.h"

namespace nanovllm {

class RemoteNodes {
 public:
  // `nodes`: the step channels of nodes 1..M-1 (host_rendezvous). abort_local wakes node 0's ranks.
  RemoteNodes(std::vector<Socket> nodes, std::function<void()> abort_local);
  ~RemoteNodes();  // tells the nodes to shut down, then closes
  RemoteNodes(const RemoteNodes&) = delete;
  RemoteNodes& operator=(const RemoteNodes&) = delete;

  // Every node's first message, once its ranks are built: the smallest num_kv_blocks over them.
  int64_t wait_ready();
  // Sends one runner call to every node (see StepEncoder::encode).
  void send(StepOp op, const SchedulerOutput* out = nullptr, bool fed_from_previous = false);
  // Waits for every node's answer to the last send; throws the first node's error.
  void wait_answers();

 private:
  struct Node {
    Socket socket;
    std::deque<NodeReply> answers;
    std::string lost;  // why the connection ended; empty while it works
  };
  void read_answers(Node& node, int node_rank);
  NodeReply next_answer(Node& node, int node_rank);

  std::vector<Node> nodes_;
  std::function<void()> abort_local_;
  StepEncoder encoder_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<std::thread> readers_;  // last: started once nodes_ is complete
};

}  // namespace nanovllm
