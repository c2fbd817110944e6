// How this build of the library was compiled, for callers that must know (tests scale their time limits
// under the sanitizers, whose runtime is several times slower). The answer comes from src/'s own flags: the
// sanitized build instruments src/ only (CMakeLists.txt), so a caller's own macros cannot tell.
#pragma once

namespace nanovllm {

// True when src/ was compiled with AddressSanitizer (the preset asan, CI's tree).
bool sanitized_build();

}  // namespace nanovllm
