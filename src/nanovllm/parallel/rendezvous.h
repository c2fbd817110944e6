// Where the processes of a multi-node tensor-parallel group meet (docs/tensor_parallel.md, section 7).
// Node 0 listens on dist_init_addr; every other node connects once as a node (its step channel) and, on
// the CPU backend, once per local rank (that rank's socket communicator). Each connection opens with a
// hello naming its role and the group's fingerprint (the settings every node must share); node 0 answers
// with its payload (the NCCL unique id on CUDA) or the reason it refuses.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nanovllm/engine/config.h"
#include "nanovllm/model/config.h"
#include "nanovllm/parallel/tcp.h"

namespace nanovllm {

enum class PeerRole : uint8_t { kNode = 1, kCommRank = 2 };

// How long node 0 waits for the other nodes to join, and a worker for node 0 to listen: nodes of a
// cluster start within minutes of each other (model loading, a job scheduler).
constexpr std::chrono::milliseconds kRendezvousTimeout{600'000};

// The settings every node of a group must share, as text (a mismatch names both values): the group's
// shape, the model's shape, the step limits and every option that changes which kernels or collectives
// a rank runs (graphs, offload, sparse policies).
std::string group_fingerprint(const EngineConfig& config, const ModelConfig& model_config);

struct HostedRendezvous {
  std::vector<Socket> nodes;       // [node_rank - 1]: the step channels of nodes 1..nnodes-1
  std::vector<Socket> comm_ranks;  // [global rank - ranks_per_node]: remote ranks' communicator sockets
};

// Node 0: takes nnodes - 1 node connections and, when `with_comm_ranks` (CPU backend), one per remote rank,
// answering each with `payload`. Throws (after telling the peer) for a different fingerprint, a duplicate
// or out-of-range id, or a peer missing after `timeout`.
HostedRendezvous host_rendezvous(const ParallelConfig& parallel, const std::string& fingerprint,
                                 bool with_comm_ranks, const std::string& payload,
                                 std::chrono::milliseconds timeout = kRendezvousTimeout);

// Nodes 1..nnodes-1: connects to dist_init_addr as `role` with `id` (node rank or global rank); returns
// the connection and node 0's payload. Throws node 0's refusal or a timeout.
std::pair<Socket, std::string> join_rendezvous(const ParallelConfig& parallel, PeerRole role, int64_t id,
                                               const std::string& fingerprint,
                                               std::chrono::milliseconds timeout = kRendezvousTimeout);

// A worker's answer to each step message (and its first, "ready", message): ok, or the error that failed
// the call on that node; `value` is its ranks' smallest num_kv_blocks in the ready message.
struct NodeReply {
  bool ok = true;
  std::string error;
  int64_t value = 0;
};
std::string encode_reply(const NodeReply& reply);
NodeReply decode_reply(std::string_view bytes);

}  // namespace nanovllm
