// Backend: which device family runs the model. Here, below every layer that chooses one (the engine's
// config, the runner, the CLI); whether this binary and machine can run CUDA is kernels/device.h.
#pragma once

#include <string>

namespace nanovllm {

enum class Backend { kCpu, kCuda };
Backend parse_backend(const std::string& name);  // "cpu" | "cuda"; throws otherwise
const char* to_string(Backend b);

}  // namespace nanovllm
