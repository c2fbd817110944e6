#include "nanovllm/kernels/ops.h"
