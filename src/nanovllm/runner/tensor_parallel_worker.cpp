#include "nanovllm/runner/tensor_parallel_worker.h"

#include <exception>
#include <memory>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/parallel/rendezvous.h"
#include "nanovllm/parallel/step_codec.h"
#include "nanovllm/runner/tensor_parallel_runner.h"
#if NANOVLLM_WITH_CUDA
#include "nanovllm/runner/cuda/cuda_tensor_parallel.h"
#endif

namespace nanovllm {
namespace {

std::unique_ptr<TensorParallelRunner> make_node_ranks(const EngineConfig& config, const ModelConfig& model_config,
                                                      const std::string& node0_payload) {
  if (config.model.backend == Backend::kCpu) return TensorParallelRunner::create_cpu(config, model_config);
#if NANOVLLM_WITH_CUDA
  return make_cuda_tensor_parallel_runner(config, model_config, &node0_payload);
#else
  (void)node0_payload;
  NANOVLLM_FAIL("the cuda backend needs a CUDA build of nanovllm; this one is built without CUDA");
#endif
}

NodeReply run_call(TensorParallelRunner& ranks, const DecodedStep& step) {
  NodeReply reply;
  try {
    switch (step.op) {
      case StepOp::kExecute: ranks.execute(step.out); break;
      case StepOp::kLaunch: ranks.launch(step.out, step.fed_from_previous); break;
      case StepOp::kWaitOldest: ranks.wait_oldest(); break;
      case StepOp::kExecuteOffloaded: ranks.execute_offloaded(step.out); break;
      case StepOp::kShutdown: break;
    }
  } catch (const std::exception& e) {
    reply.ok = false;
    reply.error = e.what();
  }
  return reply;
}

}  // namespace

void run_tensor_parallel_worker(const EngineConfig& config, const ModelConfig& model_config) {
  const ParallelConfig& p = config.parallel;
  NANOVLLM_CHECK(p.nnodes > 1 && p.node_rank >= 1, "nanovllm worker runs nodes 1..nnodes-1 of a multi-node group "
                 "(got nnodes ", p.nnodes, ", node_rank ", p.node_rank, "); node 0 runs the engine");
  auto [node0, payload] = join_rendezvous(p, PeerRole::kNode, p.node_rank, group_fingerprint(config, model_config));
  NANOVLLM_INFO("node ", p.node_rank, " joined ", p.dist_init_addr);
  std::unique_ptr<TensorParallelRunner> ranks;
  try {
    ranks = make_node_ranks(config, model_config, payload);
  } catch (const std::exception& e) {
    node0.send_frame(encode_reply(NodeReply{false, e.what(), 0}));
    throw;
  }
  StepDecoder decoder;
  try {  // node 0 may be gone from the load's reply on (a slow load outlives it)
    node0.send_frame(encode_reply(NodeReply{true, "", ranks->num_kv_blocks()}));
    for (;;) {
      const DecodedStep step = decoder.decode(node0.recv_frame());  // throws when node 0 is gone
      if (step.op == StepOp::kShutdown) break;
      node0.send_frame(encode_reply(run_call(*ranks, step)));
    }
  } catch (const Error& e) {
    NANOVLLM_FAIL("node ", p.node_rank, " lost node 0 (", p.dist_init_addr, "): ", e.what());
  }
  NANOVLLM_INFO("node ", p.node_rank, ": node 0 ended the group");
}

}  // namespace nanovllm
