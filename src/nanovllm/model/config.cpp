#include "nanovllm/model/config.h"
