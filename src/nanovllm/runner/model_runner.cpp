#include "nanovllm/engine/scheduler_output.h"
