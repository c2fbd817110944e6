#include "nanovllm/parallel/remote_nodes.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"

namespace nanovllm {

RemoteNodes::RemoteNodes(std::vector<Socket> nodes, std::function<void()> abort_local)
    : abort_local_(std::move(abort_local)) {
  nodes_.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) nodes_[i].socket = std::move(nodes[i]);
  for (size_t i = 0; i < nodes_.size(); ++i)
    readers_.emplace_back([this, i] { read_answers(nodes_[i], static_cast<int>(i) + 1); });
}

RemoteNodes::~RemoteNodes() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  const std::string bye = encoder_.encode(StepOp::kShutdown);
  for (Node& n : nodes_) {
    try {
      n.socket.send_frame(bye);
    } catch (const Error&) {  // a node already gone has nothing to shut down
    }
    n.socket.shutdown();
  }
  for (std::thread& t : readers_) t.join();
}

void RemoteNodes::read_answers(Node& node, int node_rank) {
  for (;;) {
    NodeReply reply;
    std::string lost;
    try {
      reply = decode_reply(node.socket.recv_frame(1 << 20));
    } catch (const Error& e) {
      lost = e.what();
    }
    bool abort = false;
    {
      std::lock_guard lock(mu_);
      if (!lost.empty()) {
        node.lost = lost;
        abort = !closing_;
      } else {
        abort = !reply.ok;
        node.answers.push_back(std::move(reply));
      }
    }
    cv_.notify_all();
    // A node that failed or vanished leaves node 0's ranks waiting in a collective for it: release them.
    if (abort) {
      NANOVLLM_WARN("tensor parallel: node ", node_rank, lost.empty() ? " failed a step" : " is gone: " + lost);
      abort_local_();
    }
    if (!lost.empty()) return;
  }
}

NodeReply RemoteNodes::next_answer(Node& node, int node_rank) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !node.answers.empty() || !node.lost.empty(); });
  NANOVLLM_CHECK(!node.answers.empty(), "tensor parallel: lost node ", node_rank, ": ", node.lost);
  NodeReply reply = std::move(node.answers.front());
  node.answers.pop_front();
  return reply;
}

int64_t RemoteNodes::wait_ready() {
  int64_t blocks = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeReply r = next_answer(nodes_[i], static_cast<int>(i) + 1);
    NANOVLLM_CHECK(r.ok, "tensor parallel: node ", i + 1, " could not start: ", r.error);
    blocks = std::min(blocks, r.value);
  }
  return blocks;
}

void RemoteNodes::send(StepOp op, const SchedulerOutput* out, bool fed_from_previous) {
  const std::string message = encoder_.encode(op, out, fed_from_previous);
  for (Node& n : nodes_) n.socket.send_frame(message);
}

void RemoteNodes::wait_answers() {
  std::string first_error;
  for (size_t i = 0; i < nodes_.size(); ++i) {  // every answer, so the next call's answers stay in line
    const NodeReply r = next_answer(nodes_[i], static_cast<int>(i) + 1);
    if (!r.ok && first_error.empty()) first_error = "node " + std::to_string(i + 1) + ": " + r.error;
  }
  NANOVLLM_CHECK(first_error.empty(), "tensor parallel: ", first_error);
}

}  // namespace nanovllm
