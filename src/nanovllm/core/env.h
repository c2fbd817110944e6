// Every NANOVLLM_* environment variable the library reads, parsed once (at first use) into an immutable
// struct: the one place that calls getenv (like vllm/envs.py). The README's "Environment variables"
// table documents each; anything else a user can set is an EngineConfig field or a CLI flag.
#pragma once

#include <string>

#include "nanovllm/core/logging.h"

namespace nanovllm {

struct Environment {
  // NANOVLLM_LOG_LEVEL = debug | info | warn | error | off (default warn; another value: warn).
  LogLevel log_level = LogLevel::kWarn;
  // NANOVLLM_NUM_THREADS = N >= 1: threads of the CPU backend's pool (default: the hardware's, at most 1024).
  int num_threads = 0;  // 0: unset
  // NANOVLLM_PDL = 0: CUDA kernels launch without programmatic dependent launch (a debugging switch; on by
  // default on sm_90+).
  bool pdl = true;
  // NANOVLLM_PDL_EARLY_NORM = 0 | 1: fixes whether the RMSNorm kernels launch the next projection before
  // their own wait, in decode graphs instead of timing both per batch bucket at startup, and outside them
  // (default there: off). -1: unset.
  int pdl_early_norm = -1;
  // NANOVLLM_TUNE_LINEAR = 0: decode graphs keep the projection kernels picked by timing each alone
  // (faster startup) instead of also timing the runners-up inside the graph.
  bool tune_linear = true;
};

// The process environment as parsed at the first call (later changes to the environment are not seen).
const Environment& environment();

}  // namespace nanovllm
