// CUPTI activity records, loaded with dlopen (see kernel_timeline.h).
#include "kernel_timeline.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define NANOVLLM_HAVE_CUPTI_HEADERS 1
#endif

namespace nanovllm::cuda_test {

std::string short_kernel_name(const std::string& demangled) {
  // "void ns::k<...>(args)" -> "k": cut the parameters, then the template arguments, then the scope.
  std::string s = demangled;
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {  // the first '(' outside template brackets ends the name
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') --depth;
    else if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  if (const size_t lt = s.find('<'); lt != std::string::npos) s.resize(lt);
  if (const size_t sp = s.rfind(' '); sp != std::string::npos) s = s.substr(sp + 1);
  if (const size_t sc = s.rfind("::"); sc != std::string::npos) s = s.substr(sc + 2);
  return s;
}

#ifdef NANOVLLM_HAVE_CUPTI_HEADERS
namespace {

struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  bool ok = false;
};

std::mutex g_mu;
std::vector<KernelRecord> g_records;  // filled by the buffer-completed callback

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = size_t{8} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : name;
  std::free(d);
  return out;
}

const Cupti& cupti();

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<KernelRecord> got;
  while (valid > 0 && cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {  // grid: the bytes copied
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      const char* what = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy HtoD"
                         : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy DtoH"
                                                                           : "memcpy";
      got.push_back({what, m->start, m->end, static_cast<int>(m->bytes), 0, static_cast<int>(m->deviceId)});
      continue;
    }
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back({demangle(k->name), k->start, k->end, k->gridX * k->gridY * k->gridZ, k->dynamicSharedMemory,
                   static_cast<int>(k->deviceId)});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

const Cupti& cupti() {
  static const Cupti c = [] {
    Cupti r;
    void* lib = nullptr;
    if (const char* path = std::getenv("NANOVLLM_CUPTI_LIB")) lib = dlopen(path, RTLD_NOW);
    for (const char* name : {"libcupti.so.13", "libcupti.so"})
      if (lib == nullptr) lib = dlopen(name, RTLD_NOW);
    if (lib == nullptr) return r;
    r.register_callbacks = reinterpret_cast<decltype(r.register_callbacks)>(dlsym(lib, "cuptiActivityRegisterCallbacks"));
    r.enable = reinterpret_cast<decltype(r.enable)>(dlsym(lib, "cuptiActivityEnable"));
    r.disable = reinterpret_cast<decltype(r.disable)>(dlsym(lib, "cuptiActivityDisable"));
    r.flush_all = reinterpret_cast<decltype(r.flush_all)>(dlsym(lib, "cuptiActivityFlushAll"));
    r.next_record = reinterpret_cast<decltype(r.next_record)>(dlsym(lib, "cuptiActivityGetNextRecord"));
    r.ok = r.register_callbacks && r.enable && r.disable && r.flush_all && r.next_record &&
           r.register_callbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS;
    return r;
  }();
  return c;
}

}  // namespace

bool KernelTimeline::available() { return cupti().ok; }

void KernelTimeline::start() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  if (cupti().ok) {
    cupti().enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cupti().enable(CUPTI_ACTIVITY_KIND_MEMCPY);
  }
}

std::vector<KernelRecord> KernelTimeline::stop() {
  if (!cupti().ok) return {};
  cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cupti().disable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<KernelRecord> out = std::move(g_records);
  g_records.clear();
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

#else  // no CUPTI headers at build time

bool KernelTimeline::available() { return false; }
void KernelTimeline::start() {}
std::vector<KernelRecord> KernelTimeline::stop() { return {}; }

#endif

}  // namespace nanovllm::cuda_test
