// Scores by (row, context length): rows are tasks (RULER) or needle depths (needle sweep). A cell's score
// is RULER's: the mean per-sample metric times 100, rounded to 2 decimals; `passed` counts samples scoring
// >= 0.5 (the original nano-vLLM harness's pass rule). Printed as a table, saved as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm::eval {

class ScoreTable {
 public:
  ScoreTable(std::vector<std::string> rows, std::vector<int64_t> contexts);

  void add(const std::string& row, int64_t context, double score, int64_t prompt_tokens);

  // NaN for an empty cell.
  double score(size_t row, size_t context) const;
  double context_mean(size_t context) const;  // mean over the rows' scores
  double overall_mean() const;                // mean over every non-empty cell

  // Rows × contexts, a "mean" row; `row_header` names the first column ("task", "depth").
  std::string format(const std::string& row_header) const;
  // {"scores": {row: {context: score}}, "mean": {context: mean}, "overall", "cells": [{row_key, context,
  //  score, samples, passed, mean_prompt_tokens}]}
  nlohmann::ordered_json to_json(const std::string& row_key) const;

 private:
  struct Cell {
    double sum = 0;
    int64_t n = 0, passed = 0, prompt_tokens = 0;
  };
  size_t row_index(const std::string& row) const;
  size_t context_index(int64_t context) const;
  std::vector<std::string> rows_;
  std::vector<int64_t> contexts_;
  std::vector<Cell> cells_;  // [rows, contexts]
};

// 4096 -> "4K", 131072 -> "128K", 1000 -> "1000".
std::string context_label(int64_t context);

}  // namespace nanovllm::eval
