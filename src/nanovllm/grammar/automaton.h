// A Grammar compiled into a byte-level pushdown automaton: each rule becomes a DFA whose edges are bytes
// or calls of other rules. A parse state is a stack of (rule DFA state) frames: the top frame reads bytes,
// a call edge pushes the callee's start state (the caller's frame moves to the edge's return state), and a
// frame in an accepting state may pop. All states of all rules share one numbering and one table of byte
// classes (bytes that every state treats alike), so a byte step is one table lookup.
//
// Compilation checks what the runtime relies on: every rule is defined, the root can match something,
// no rule is left-recursive (a rule reaching itself before reading a byte; the matcher would loop), and
// the automaton stays below kMaxAutomatonStates. States that cannot reach an accepting end are removed,
// so every stack the matcher keeps can still complete.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

constexpr int64_t kMaxAutomatonStates = 1 << 20;

// 256 bits: a set of bytes.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  void set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  bool merge(const ByteSet& o) {  // true if this grew
    bool grew = false;
    for (size_t i = 0; i < 4; ++i) {
      const uint64_t w = words[i] | o.words[i];
      grew |= w != words[i];
      words[i] = w;
    }
    return grew;
  }
};

struct PdaCall {
  int32_t callee_start = 0;  // the callee rule's start state
  int32_t return_state = 0;  // where the caller continues once the callee pops
};

struct PdaTables {
  static constexpr uint8_t kAccepting = 1;  // the rule may end here (pop)
  static constexpr uint8_t kReadsBytes = 2;  // has at least one byte edge

  int32_t num_byte_classes = 0;
  std::array<uint8_t, 256> byte_class{};
  std::vector<int32_t> next;              // [num_states, num_byte_classes] -> state, -1: no edge
  std::vector<uint8_t> flags;             // [num_states]
  std::vector<int32_t> state_rule;        // [num_states] the rule a state belongs to
  std::vector<int32_t> call_begin;        // [num_states + 1] into calls
  std::vector<PdaCall> calls;
  std::vector<int32_t> rule_start;        // [num_rules]
  std::vector<std::string> rule_names;    // [num_rules]
  std::vector<ByteSet> follow;            // [num_rules] bytes that may come right after the rule ends
  std::vector<uint8_t> rule_can_end_root; // [num_rules] the rule's end may be the end of the whole match
  int32_t root_start = 0;

  int32_t num_states() const { return static_cast<int32_t>(flags.size()); }
  int32_t step(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_byte_classes) + byte_class[byte]];
  }
};

// Throws nanovllm::Error naming the rule for the problems listed above.
PdaTables compile_grammar(const Grammar& grammar);

}  // namespace nanovllm::grammar
