#include "nanovllm/engine/sequence.h"
