// `nanovllm worker`: a node other than node 0 of a multi-node tensor-parallel group
// (docs/tensor_parallel.md, section 7). It joins node 0 at dist_init_addr, builds this node's ranks (CPU
// or CUDA, as node 0's), reports them ready, then runs every runner call node 0 sends (StepDecoder) and
// answers each with ok or the error. No scheduler, tokenizer or server: node 0 owns the requests.
#pragma once

#include "nanovllm/engine/config.h"
#include "nanovllm/model/config.h"

namespace nanovllm {

// config as resolved by EngineConfig::resolve, with parallel.nnodes > 1 and parallel.node_rank >= 1.
// Returns when node 0 shuts the group down (its engine ended); throws when node 0 disappears, refuses
// this node, or this node's ranks cannot be built (after telling node 0).
void run_tensor_parallel_worker(const EngineConfig& config, const ModelConfig& model_config);

}  // namespace nanovllm
