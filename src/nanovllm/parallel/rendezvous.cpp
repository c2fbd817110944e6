#include "nanovllm/parallel/rendezvous.h"

#include <sstream>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/parallel/wire.h"

namespace nanovllm {
namespace {

constexpr uint32_t kMagic = 0x5054564e;  // "NVTP"
constexpr uint32_t kProtocolVersion = 1;
// A connection that sends no hello in this long is not one of ours (a port scan, a health check).
constexpr std::chrono::milliseconds kHelloTimeout{30'000};

const char* role_name(PeerRole role) { return role == PeerRole::kNode ? "node" : "rank"; }

// "a=1;b=2" -> the first key whose values differ, as "a: 1 here, 2 there"; "" when equal.
std::string first_difference(const std::string& mine, const std::string& theirs) {
  auto split = [](const std::string& s) {
    std::vector<std::string> items;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ';');) items.push_back(item);
    return items;
  };
  const auto a = split(mine), b = split(theirs);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
    if (x != y) return "node 0 has " + x + ", the peer " + y;
  }
  return "";
}

}  // namespace

std::string group_fingerprint(const EngineConfig& c, const ModelConfig& m) {
  std::ostringstream f;
  f << "tensor_parallel_size=" << c.parallel.tensor_parallel_size << ";nnodes=" << c.parallel.nnodes
    << ";backend=" << to_string(c.model.backend) << ";model=" << m.model_type << "/L" << m.num_hidden_layers
    << "/H" << m.hidden_size << "/I" << m.intermediate_size << "/heads" << m.num_attention_heads << ":"
    << m.num_key_value_heads << "x" << m.head_dim << "/V" << m.vocab_size << "/E" << m.moe.num_experts << "x"
    << m.moe.num_experts_per_tok << "x" << m.moe.moe_intermediate_size << ";dtype=" << dtype_name(m.torch_dtype)
    << ";max_model_len=" << c.model.max_model_len << ";enforce_eager=" << c.model.enforce_eager
    << ";max_num_batched_tokens=" << c.scheduler.max_num_batched_tokens
    << ";max_num_seqs=" << c.scheduler.max_num_seqs << ";block_size=" << c.cache.block_size
    << ";offload=" << c.offload.enabled << "/" << c.offload.block_size << "/" << c.offload.num_kv_buffers << "/" << c.offload.max_num_seqs
    << ";sparse=" << c.sparse.policy << "/" << c.sparse.budget_tokens << "/"
    << c.sparse.gpu_cache_tokens << ";sparse_prefill=" << static_cast<int>(c.sparse_prefill.policy) << "/"
    << c.sparse_prefill.threshold << "/" << c.sparse_prefill.min_tokens;
  return f.str();
}

HostedRendezvous host_rendezvous(const ParallelConfig& parallel, const std::string& fingerprint,
                                 bool with_comm_ranks, const std::string& payload,
                                 std::chrono::milliseconds timeout) {
  const auto [host, port] = parse_host_port(parallel.dist_init_addr);
  Listener listener("", port);  // every interface: HOST is how the other nodes reach this one
  const int64_t per_node = parallel.ranks_per_node();
  HostedRendezvous rv;
  rv.nodes.resize(static_cast<size_t>(parallel.nnodes - 1));
  rv.comm_ranks.resize(with_comm_ranks ? static_cast<size_t>(parallel.tensor_parallel_size - per_node) : 0);
  size_t missing = rv.nodes.size() + rv.comm_ranks.size();
  NANOVLLM_INFO("node 0 waits on port ", port, " for ", rv.nodes.size(), " nodes",
                with_comm_ranks ? " and their ranks" : "");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (missing > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    NANOVLLM_CHECK(left.count() > 0, "tensor parallel: ", missing, " of the other nodes' connections did not come to ",
                   parallel.dist_init_addr, " within ", timeout.count() / 1000, " s (started `nanovllm worker` "
                   "with --node-rank 1..", parallel.nnodes - 1, "?)");
    Socket s;
    try {
      s = listener.accept(left);
    } catch (const Error&) {
      continue;  // timed out: reported above, naming what is missing
    }
    uint32_t magic = 0, version = 0;
    PeerRole role{};
    int64_t id = 0;
    std::string theirs;
    try {
      s.set_receive_timeout(kHelloTimeout);
      const std::string hello = s.recv_frame(1 << 16);
      ByteReader r(hello, "hello");
      magic = r.get<uint32_t>();
      version = r.get<uint32_t>();
      role = r.get<PeerRole>();
      id = r.get<int64_t>();
      theirs = r.get_string();
      s.set_receive_timeout(std::chrono::milliseconds::zero());
    } catch (const Error& e) {
      NANOVLLM_WARN("tensor parallel: ignoring a connection from ", s.peer(), ": ", e.what());
      continue;
    }
    if (magic != kMagic) {
      NANOVLLM_WARN("tensor parallel: ignoring a connection from ", s.peer(), " (not a nano-vLLM node)");
      continue;
    }
    std::string refusal;
    std::vector<Socket>* slots = role == PeerRole::kNode ? &rv.nodes : &rv.comm_ranks;
    const int64_t first = role == PeerRole::kNode ? 1 : per_node;
    if (version != kProtocolVersion) {
      refusal = "protocol version " + std::to_string(version) + ", node 0 speaks " + std::to_string(kProtocolVersion);
    } else if (role != PeerRole::kNode && role != PeerRole::kCommRank) {
      refusal = "unknown role " + std::to_string(static_cast<int>(role));
    } else if (id < first || id - first >= static_cast<int64_t>(slots->size())) {
      refusal = std::string(role_name(role)) + " " + std::to_string(id) + " is outside this group (" +
                std::to_string(parallel.nnodes) + " nodes, " + std::to_string(parallel.tensor_parallel_size) +
                " ranks" + (role == PeerRole::kCommRank && !with_comm_ranks ? ", no socket ranks" : "") + ")";
    } else if ((*slots)[static_cast<size_t>(id - first)].valid()) {
      refusal = std::string(role_name(role)) + " " + std::to_string(id) + " joined twice";
    } else if (theirs != fingerprint) {
      refusal = "its settings differ: " + first_difference(fingerprint, theirs);
    }
    ByteWriter w;
    w.put<uint8_t>(refusal.empty());
    w.put_string(refusal);
    w.put_string(payload);
    s.send_frame(w.bytes());
    NANOVLLM_CHECK(refusal.empty(), "tensor parallel: refused ", role_name(role), " ", id, " from ", s.peer(), ": ",
                   refusal);
    s.set_peer(std::string(role_name(role)) + " " + std::to_string(id) + " at " + s.peer());
    (*slots)[static_cast<size_t>(id - first)] = std::move(s);
    --missing;
  }
  return rv;
}

std::pair<Socket, std::string> join_rendezvous(const ParallelConfig& parallel, PeerRole role, int64_t id,
                                               const std::string& fingerprint, std::chrono::milliseconds timeout) {
  const auto [host, port] = parse_host_port(parallel.dist_init_addr);
  Socket s = connect_to(host, port, timeout);
  ByteWriter w;
  w.put(kMagic);
  w.put(kProtocolVersion);
  w.put(role);
  w.put(id);
  w.put_string(fingerprint);
  s.send_frame(w.bytes());
  const std::string answer = s.recv_frame(1 << 20);
  ByteReader r(answer, "node 0's answer");
  const bool ok = r.get<uint8_t>() != 0;
  const std::string refusal = r.get_string();
  std::string payload = r.get_string();
  NANOVLLM_CHECK(ok, "node 0 (", parallel.dist_init_addr, ") refused ", role_name(role), " ", id, ": ", refusal);
  s.set_peer("node 0 at " + parallel.dist_init_addr);
  return {std::move(s), std::move(payload)};
}

std::string encode_reply(const NodeReply& reply) {
  ByteWriter w;
  w.put<uint8_t>(reply.ok);
  w.put_string(reply.error);
  w.put(reply.value);
  return w.take();
}

NodeReply decode_reply(std::string_view bytes) {
  ByteReader r(bytes, "node reply");
  NodeReply reply;
  reply.ok = r.get<uint8_t>() != 0;
  reply.error = r.get_string();
  reply.value = r.get<int64_t>();
  r.expect_done();
  return reply;
}

}  // namespace nanovllm
