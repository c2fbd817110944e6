#include "nanovllm/grammar/pda.h"

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {
namespace {

constexpr uint64_t kEmptyKey = ~uint64_t{0};

uint64_t node_key(int32_t state, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent + 1);
}
size_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}

}  // namespace

int32_t PdaRuntime::intern(int32_t state, int32_t parent) {
  if (table_keys_.size() < 2 * (node_state_.size() + 1)) {  // keep the load under 1/2
    const size_t cap = table_keys_.empty() ? 1024 : table_keys_.size() * 2;
    table_keys_.assign(cap, kEmptyKey);
    table_nodes_.assign(cap, -1);
    for (size_t n = 0; n < node_state_.size(); ++n) {
      size_t i = hash_key(node_key(node_state_[n], node_parent_[n])) & (cap - 1);
      while (table_keys_[i] != kEmptyKey) i = (i + 1) & (cap - 1);
      table_keys_[i] = node_key(node_state_[n], node_parent_[n]);
      table_nodes_[i] = static_cast<int32_t>(n);
    }
  }
  const uint64_t key = node_key(state, parent);
  const size_t mask = table_keys_.size() - 1;
  size_t i = hash_key(key) & mask;
  while (table_keys_[i] != kEmptyKey) {
    if (table_keys_[i] == key) return table_nodes_[i];
    i = (i + 1) & mask;
  }
  const auto node = static_cast<int32_t>(node_state_.size());
  table_keys_[i] = key;
  table_nodes_[i] = node;
  node_state_.push_back(state);
  node_parent_.push_back(parent);
  mark_.push_back(0);
  return node;
}

void PdaRuntime::close(int32_t node) {
  work_.push_back(node);
  while (!work_.empty()) {
    const int32_t x = work_.back();
    work_.pop_back();
    if (mark_[static_cast<size_t>(x)] == epoch_) continue;
    mark_[static_cast<size_t>(x)] = epoch_;
    const int32_t s = node_state_[static_cast<size_t>(x)];
    const int32_t parent = node_parent_[static_cast<size_t>(x)];
    const uint8_t flags = t_->flags[static_cast<size_t>(s)];
    if (flags & PdaTables::kReadsBytes) tops_.push_back(x);
    for (int32_t k = t_->call_begin[static_cast<size_t>(s)]; k < t_->call_begin[static_cast<size_t>(s) + 1]; ++k) {
      const PdaCall& call = t_->calls[static_cast<size_t>(k)];
      work_.push_back(intern(call.callee_start, intern(call.return_state, parent)));
    }
    if (flags & PdaTables::kAccepting) {
      if (parent < 0) {
        can_end_.back() = 1;
      } else {
        work_.push_back(parent);
      }
    }
  }
}

void PdaRuntime::reset_to_root() {
  tops_.clear();
  step_begin_.assign(1, 0);
  can_end_.assign(1, 0);
  if (++epoch_ == 0) std::fill(mark_.begin(), mark_.end(), 0), epoch_ = 1;
  close(intern(t_->root_start, -1));
}

void PdaRuntime::reset_to_state(int32_t state) {
  NANOVLLM_ASSERT(t_->flags[static_cast<size_t>(state)] & PdaTables::kReadsBytes, "reset_to_state: state ", state,
                  " reads no byte");
  tops_.assign(1, intern(state, -1));
  step_begin_.assign(1, 0);
  can_end_.assign(1, 0);
}

bool PdaRuntime::advance(uint8_t byte) {
  const size_t begin = step_begin_.back(), end = tops_.size();
  step_begin_.push_back(static_cast<uint32_t>(end));
  can_end_.push_back(0);
  if (++epoch_ == 0) std::fill(mark_.begin(), mark_.end(), 0), epoch_ = 1;
  for (size_t i = begin; i < end; ++i) {
    const int32_t n = tops_[i];
    const int32_t s = t_->step(node_state_[static_cast<size_t>(n)], byte);
    if (s >= 0) close(intern(s, node_parent_[static_cast<size_t>(n)]));
  }
  if (tops_.size() == end && !can_end_.back()) {
    step_begin_.pop_back();
    can_end_.pop_back();
    return false;
  }
  return true;
}

void PdaRuntime::pop_steps(size_t n) {
  NANOVLLM_ASSERT(n < num_steps(), "pop_steps(", n, ") with ", num_steps(), " steps");
  const size_t keep = num_steps() - n;
  tops_.resize(step_begin_[keep]);
  step_begin_.resize(keep);
  can_end_.resize(keep);
}

}  // namespace nanovllm::grammar
