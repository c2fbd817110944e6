#include "engine_config.h"

#include <pybind11/stl.h>

#include <functional>
#include <map>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/device.h"

namespace py = pybind11;

namespace nanovllm::python {
namespace {

using Setter = std::function<void(EngineConfig&, py::handle)>;

template <class T>
T cast_option(py::handle value, const std::string& name) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("LLM(): " + name + " has the wrong type (" +
                         py::type::of(value).attr("__name__").cast<std::string>() + ")");
  }
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = [] {
    std::map<std::string, Setter> t;
    auto set = [&t](const std::string& name, auto apply) {
      t[name] = [name, apply](EngineConfig& c, py::handle v) { apply(c, v, name); };
    };
    auto i64 = [](py::handle v, const std::string& n) { return cast_option<int64_t>(v, n); };
    auto flag = [](py::handle v, const std::string& n) { return cast_option<bool>(v, n); };
    auto real = [](py::handle v, const std::string& n) { return cast_option<double>(v, n); };
    // model
    set("backend", [](EngineConfig& c, py::handle v, const std::string& n) {
      c.model.backend = v.is_none() ? default_backend() : parse_backend(cast_option<std::string>(v, n));
    });
    set("max_model_len", [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.model.max_model_len = v.is_none() ? 0 : i64(v, n);
    });
    set("seed", [](EngineConfig& c, py::handle v, const std::string& n) {
      c.model.seed = v.is_none() ? 0 : cast_option<uint64_t>(v, n);
    });
    set("enforce_eager", [flag](EngineConfig& c, py::handle v, const std::string& n) { c.model.enforce_eager = flag(v, n); });
    // cache
    auto block_size = [i64](EngineConfig& c, py::handle v, const std::string& n) { c.cache.block_size = i64(v, n); };
    set("block_size", block_size);
    set("kvcache_block_size", block_size);  // nano-vLLM's name
    auto num_blocks = [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.cache.num_kv_blocks = v.is_none() || i64(v, n) < 0 ? 0 : i64(v, n);  // nano-vLLM: -1 = from memory
    };
    set("num_kv_blocks", num_blocks);
    set("num_kvcache_blocks", num_blocks);  // nano-vLLM's name
    set("kv_cache_bytes", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.cache.kv_cache_bytes = i64(v, n); });
    set("gpu_memory_utilization", [real](EngineConfig& c, py::handle v, const std::string& n) {
      c.cache.gpu_memory_utilization = real(v, n);
    });
    set("enable_prefix_caching", [flag](EngineConfig& c, py::handle v, const std::string& n) {
      c.cache.enable_prefix_caching = flag(v, n);
    });
    // scheduler
    set("max_num_seqs", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.scheduler.max_num_seqs = i64(v, n); });
    set("max_num_batched_tokens", [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.scheduler.max_num_batched_tokens = i64(v, n);
    });
    set("enable_chunked_prefill", [flag](EngineConfig& c, py::handle v, const std::string& n) {
      c.scheduler.enable_chunked_prefill = flag(v, n);
    });
    set("async_scheduling", [flag](EngineConfig& c, py::handle v, const std::string& n) {
      c.scheduler.async_scheduling = flag(v, n);
    });
    // offload
    set("enable_cpu_offload", [flag](EngineConfig& c, py::handle v, const std::string& n) { c.offload.enabled = flag(v, n); });
    set("num_kv_buffers", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.offload.num_kv_buffers = i64(v, n); });
    set("offload_max_num_seqs", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.offload.max_num_seqs = i64(v, n); });
    set("offload_block_size", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.offload.block_size = i64(v, n); });
    set("cpu_memory_limit", [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.offload.cpu_memory_limit = v.is_none() ? 0 : i64(v, n);
    });
    set("offload_min_tokens", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.offload.min_tokens = i64(v, n); });
    // sparse
    set("sparse_policy", [](EngineConfig& c, py::handle v, const std::string& n) {
      c.sparse.policy = parse_sparse_policy(cast_option<std::string>(v, n));
    });
    set("sparse_budget", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.sparse.budget_tokens = i64(v, n); });
    set("sparse_gpu_cache_tokens", [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.sparse.gpu_cache_tokens = v.is_none() ? -1 : i64(v, n);  // None: 4 x sparse_budget
    });
    // sparse prefill
    set("sparse_prefill_policy", [](EngineConfig& c, py::handle v, const std::string& n) {
      c.sparse_prefill.policy = parse_sparse_prefill_policy(cast_option<std::string>(v, n));
    });
    set("sparse_prefill_threshold", [real](EngineConfig& c, py::handle v, const std::string& n) {
      c.sparse_prefill.threshold = v.is_none() ? 0 : real(v, n);  // None: the policy's default
    });
    auto prefill_int = [&set, i64](const std::string& name, int64_t SparsePrefillConfig::*field) {
      set(name, [i64, field](EngineConfig& c, py::handle v, const std::string& n) { c.sparse_prefill.*field = i64(v, n); });
    };
    prefill_int("sparse_prefill_dense_layers", &SparsePrefillConfig::dense_layers);
    prefill_int("sparse_prefill_min_tokens", &SparsePrefillConfig::min_tokens);
    prefill_int("sparse_prefill_block_size", &SparsePrefillConfig::block_size);
    prefill_int("sparse_prefill_stride", &SparsePrefillConfig::stride);
    prefill_int("sparse_prefill_last_q", &SparsePrefillConfig::last_q);
    prefill_int("sparse_prefill_vertical", &SparsePrefillConfig::vertical);
    prefill_int("sparse_prefill_slash", &SparsePrefillConfig::slash);
    prefill_int("sparse_prefill_min_budget", &SparsePrefillConfig::min_budget);
    prefill_int("sparse_prefill_budget", &SparsePrefillConfig::budget_tokens);
    set("sparse_prefill_tau", [real](EngineConfig& c, py::handle v, const std::string& n) {
      c.sparse_prefill.tau = real(v, n);
    });
    // parallel (docs/tensor_parallel.md): this process is node 0 of the group; nodes 1.. run `nanovllm worker`.
    set("tensor_parallel_size", [i64](EngineConfig& c, py::handle v, const std::string& n) {
      c.parallel.tensor_parallel_size = i64(v, n);
    });
    set("nnodes", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.parallel.nnodes = i64(v, n); });
    set("node_rank", [i64](EngineConfig& c, py::handle v, const std::string& n) { c.parallel.node_rank = i64(v, n); });
    set("dist_init_addr", [](EngineConfig& c, py::handle v, const std::string& n) {
      c.parallel.dist_init_addr = cast_option<std::string>(v, n);
    });
    return t;
  }();
  return table;
}

}  // namespace

EngineConfig engine_config_from_kwargs(const std::string& model, const py::kwargs& kwargs) {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = default_backend();
  for (const auto& [k, v] : kwargs) {
    const std::string name = k.cast<std::string>();
    const auto it = setters().find(name);
    if (it == setters().end()) {
      std::string known;
      for (const std::string& n : engine_option_names()) known += (known.empty() ? "" : ", ") + n;
      throw py::type_error("LLM() got an unexpected keyword argument '" + name + "' (engine options: " + known + ")");
    }
    it->second(c, v);
  }
  return c;
}

std::vector<std::string> engine_option_names() {
  std::vector<std::string> names;
  for (const auto& [name, setter] : setters()) names.push_back(name);
  return names;
}

}  // namespace nanovllm::python
