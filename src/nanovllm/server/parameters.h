// Which request parameters the server honours. A parameter the engine does not implement gets a 400 that
// names it, never silence: a client asking for JSON mode, best_of or a required tool call must learn that it
// did not get one. Values equal to OpenAI's defaults ask for nothing and are accepted.
#pragma once

#include <nlohmann/json.hpp>

#include "nanovllm/server/protocol.h"

namespace nanovllm::server {

// Throws ApiException (400, param = the key) for the first key of `body` that is unknown, or known but not
// implemented with the value given. The implemented ones are validated where they are read.
void check_parameters(const nlohmann::ordered_json& body, Endpoint endpoint);

}  // namespace nanovllm::server
