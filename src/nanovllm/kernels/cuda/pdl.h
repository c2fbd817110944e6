// Programmatic Dependent Launch (PDL) switch, host side (no device code: tests and benchmarks include it).
// When on (the default on compute capability >= 9.0; NANOVLLM_PDL=0 in the environment turns it off),
// the decode-path kernels are launched with cudaLaunchAttributeProgrammaticStreamSerialization: a kernel
// may start while its predecessor in the stream finishes, runs its prologue (weight prefetch, metadata
// loads), and waits (griddepcontrol.wait) before touching the predecessor's outputs. See pdl.cuh.
#pragma once

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// PDL requested (environment / set_pdl_enabled). Launches still skip the attribute on devices < sm_90.
bool pdl_enabled();
// Benchmarks and tests: turn PDL launches on or off for launches that follow (graphs keep what they
// captured). Not thread-safe with concurrent launches.
void set_pdl_enabled(bool on);
// True when launches on the current device should carry the PDL attribute (enabled and sm_90+).
bool pdl_use_attribute();
// Whether rms_norm / add_rms_norm launch their dependents before their own wait (pdl.cuh, "early
// trigger"): the next projection's CTAs then start their weight copies during the norm's predecessor.
// Which pays depends on the model. H200, bs=1 decode @1K, same machine (session 12): Qwen3-0.6B
// 0.887-0.902 -> 0.818-0.825 ms/token; Qwen3-8B 4.420-4.445 -> 4.478-4.552 (its early qkv projection
// CTAs keep the decode attention's CTAs from starting beside them). So the CUDA runner captures each
// decode graph bucket both ways, times the two and keeps the faster (CudaModelRunner::
// capture_tuned_decode); everything else uses the default, on. NANOVLLM_PDL_EARLY_NORM=0 / 1 in the
// environment fixes it (no timing). Not thread-safe with concurrent launches.
bool pdl_early_norm();
void set_pdl_early_norm(bool on);
// NANOVLLM_PDL_EARLY_NORM's value: -1 unset (the runner tunes), else 0 / 1.
int pdl_early_norm_env();

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
