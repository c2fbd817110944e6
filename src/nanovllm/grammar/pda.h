// PdaRuntime: the set of parse stacks of a PdaTables automaton after each byte, with rollback.
//
// Stacks share their tails: a frame is a node (state, parent node), interned so equal stacks are one node
// id. After every byte the set is closed: calls are entered and finished rules popped until every stack's
// top can read a byte (the "tops"); a stack that pops its last frame means the text so far can end there
// (can_end). Each byte adds one step to a history (the tops and can_end after it), so rolling back n bytes
// is dropping n steps. Nodes are never freed while the runtime lives: the stacks of every step stay valid.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "nanovllm/grammar/automaton.h"

namespace nanovllm::grammar {

class PdaRuntime {
 public:
  explicit PdaRuntime(const PdaTables& tables) : t_(&tables) {}

  // Step 0: the closure of the root rule's start (a whole match).
  void reset_to_root();
  // Step 0: one frame at `state` (which reads bytes) with nothing below it, not closed: what a token does
  // from this position alone (the token mask's context-independent pass). can_end then means "this rule
  // can end here and leave to whatever called it".
  void reset_to_state(int32_t state);

  // Reads one byte: true and one more step when some stack accepts it or a stack could end right after
  // it; false (and no new step) otherwise.
  bool advance(uint8_t byte);
  // Drops the last n steps (n < num_steps()).
  void pop_steps(size_t n);
  size_t num_steps() const { return can_end_.size(); }

  std::span<const int32_t> tops() const {
    return {tops_.data() + step_begin_.back(), tops_.size() - step_begin_.back()};
  }
  bool can_end() const { return can_end_.back() != 0; }
  bool can_end_at(size_t step) const { return can_end_[step] != 0; }
  int32_t node_state(int32_t node) const { return node_state_[static_cast<size_t>(node)]; }
  size_t num_nodes() const { return node_state_.size(); }

 private:
  int32_t intern(int32_t state, int32_t parent);
  void close(int32_t node);  // appends the closure of `node` to the current step

  const PdaTables* t_;
  std::vector<int32_t> node_state_, node_parent_;  // [nodes]; parent -1: bottom of the stack
  std::vector<uint64_t> table_keys_;                // open addressing: (state, parent + 1) -> node
  std::vector<int32_t> table_nodes_;
  std::vector<uint32_t> mark_;                      // [nodes] step epoch of the last visit
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;

  std::vector<int32_t> tops_;         // the tops of every step, concatenated
  std::vector<uint32_t> step_begin_;  // [steps] where each step's tops begin
  std::vector<uint8_t> can_end_;      // [steps]
};

}  // namespace nanovllm::grammar
