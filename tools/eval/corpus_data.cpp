// The built-in haystack text (assets/haystack/kjv.txt, 4 MB), linked into the binary with the
// assembler's .incbin: `nanovllm eval` then needs no data files beside it (the binary is carried to the
// GPU machine on its own) and every machine reads the same bytes. ccache does not cache a file with
// .incbin, so an edited text always rebuilds; CMake's OBJECT_DEPENDS makes it rebuild at all.
#include <string_view>

#ifndef NANOVLLM_HAYSTACK_FILE
#error "NANOVLLM_HAYSTACK_FILE must name the haystack text (tools/eval/CMakeLists.txt sets it)"
#endif

__asm__(".pushsection .rodata.nanovllm_haystack, \"a\"\n"
        ".global nanovllm_haystack_begin\n"
        "nanovllm_haystack_begin:\n"
        ".incbin \"" NANOVLLM_HAYSTACK_FILE "\"\n"
        ".global nanovllm_haystack_end\n"
        "nanovllm_haystack_end:\n"
        ".popsection\n");

extern "C" const char nanovllm_haystack_begin[];
extern "C" const char nanovllm_haystack_end[];

namespace nanovllm::eval {

std::string_view builtin_haystack_text() {
  return {nanovllm_haystack_begin, static_cast<size_t>(nanovllm_haystack_end - nanovllm_haystack_begin)};
}

}  // namespace nanovllm::eval
