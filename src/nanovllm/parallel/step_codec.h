// The step channel's messages (docs/tensor_parallel.md, section 7): node 0 runs the scheduler; every other
// node holds a copy of the Sequence fields its runners read (token ids, block table, progress, sampling
// parameters) and receives, with each runner call, only what changed since the last message — typically a
// token and a block id per sequence per decode step, a few KB per step.
//
// StepEncoder (node 0) remembers what the workers know; StepDecoder (each worker) applies the message to
// its copies and hands back a SchedulerOutput pointing into them. Both forget a sequence not scheduled for
// kForgetAfterSteps messages (the same rule on both sides, so they agree without a message); if it is
// scheduled again (a long preemption), the encoder sends it whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nanovllm/engine/scheduler_output.h"

namespace nanovllm {

// The ModelRunner call a message stands for.
enum class StepOp : uint8_t { kExecute = 1, kLaunch, kWaitOldest, kExecuteOffloaded, kShutdown };

constexpr int64_t kForgetAfterSteps = 1024;

class StepEncoder {
 public:
  // `out` for kExecute, kLaunch and kExecuteOffloaded (null otherwise).
  std::string encode(StepOp op, const SchedulerOutput* out = nullptr, bool fed_from_previous = false);
  size_t num_known() const { return known_.size(); }

 private:
  struct Known {
    int64_t final_tokens = 0;        // leading token ids the workers have that can no longer change
    std::vector<int32_t> block_table;
    int64_t last_message = 0;
  };
  std::unordered_map<int64_t, Known> known_;
  int64_t messages_ = 0;  // messages that carried a SchedulerOutput
};

struct DecodedStep {
  StepOp op = StepOp::kShutdown;
  bool fed_from_previous = false;
  SchedulerOutput out;  // points into the decoder's sequences; valid until the next decode()
};

class StepDecoder {
 public:
  // Applies a message from StepEncoder::encode. Throws nanovllm::Error for a malformed message or one that
  // refers to a sequence this worker does not hold (the encoder and decoder disagree: a bug).
  DecodedStep decode(std::string_view bytes);
  size_t num_known() const { return seqs_.size(); }
  const Sequence* find(int64_t seq_id) const;

 private:
  struct Held {
    std::unique_ptr<Sequence> seq;  // stable address: a launched step may still read it
    int64_t last_message = 0;
  };
  std::unordered_map<int64_t, Held> seqs_;
  int64_t messages_ = 0;
};

}  // namespace nanovllm
