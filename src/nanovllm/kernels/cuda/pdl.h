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

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
