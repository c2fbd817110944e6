// --dump-prompts: samples as JSON lines, the one source of prompts for the trainer and the HF comparison
// (scripts/train_retrieval_model.py, scripts/hf_eval_ruler.py), so no Python re-implements a task.
// Each line:
//   {"task", "context", "index", "seed", "metric", "max_new_tokens", "depth", "haystack_units",
//    "answers": [...], "target", "target_ids": [...], "prompt_tokens", "prompt", "prompt_ids": [...]}
// target_ids: the target encoded without special tokens (the trainer appends EOS).
#pragma once

#include <ostream>

#include "eval/sample.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::eval {

void write_sample_jsonl(std::ostream& out, const Sample& sample, const tokenizer::Tokenizer& tokenizer);

}  // namespace nanovllm::eval
