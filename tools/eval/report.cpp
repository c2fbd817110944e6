#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

double round2(double x) { return std::round(x * 100.0) / 100.0; }

std::string fixed(double x) {
  if (std::isnan(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

}  // namespace

std::string context_label(int64_t context) {
  if (context >= 1024 && context % 1024 == 0) return std::to_string(context / 1024) + "K";
  return std::to_string(context);
}

ScoreTable::ScoreTable(std::vector<std::string> rows, std::vector<int64_t> contexts)
    : rows_(std::move(rows)), contexts_(std::move(contexts)), cells_(rows_.size() * contexts_.size()) {}

size_t ScoreTable::row_index(const std::string& row) const {
  const auto it = std::find(rows_.begin(), rows_.end(), row);
  NANOVLLM_CHECK(it != rows_.end(), "ScoreTable: unknown row ", row);
  return static_cast<size_t>(it - rows_.begin());
}

size_t ScoreTable::context_index(int64_t context) const {
  const auto it = std::find(contexts_.begin(), contexts_.end(), context);
  NANOVLLM_CHECK(it != contexts_.end(), "ScoreTable: unknown context ", context);
  return static_cast<size_t>(it - contexts_.begin());
}

void ScoreTable::add(const std::string& row, int64_t context, double score, int64_t prompt_tokens) {
  Cell& c = cells_[row_index(row) * contexts_.size() + context_index(context)];
  c.sum += score;
  ++c.n;
  c.passed += score >= 0.5 ? 1 : 0;
  c.prompt_tokens += prompt_tokens;
}

double ScoreTable::score(size_t row, size_t context) const {
  const Cell& c = cells_[row * contexts_.size() + context];
  return c.n == 0 ? std::numeric_limits<double>::quiet_NaN() : round2(100.0 * c.sum / static_cast<double>(c.n));
}

double ScoreTable::context_mean(size_t context) const {
  double sum = 0;
  int n = 0;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const double s = score(r, context);
    if (!std::isnan(s)) sum += s, ++n;
  }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : round2(sum / n);
}

double ScoreTable::overall_mean() const {
  double sum = 0;
  int n = 0;
  for (size_t r = 0; r < rows_.size(); ++r)
    for (size_t c = 0; c < contexts_.size(); ++c) {
      const double s = score(r, c);
      if (!std::isnan(s)) sum += s, ++n;
    }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : round2(sum / n);
}

std::string ScoreTable::format(const std::string& row_header) const {
  size_t w0 = std::max<size_t>(row_header.size(), 4);
  for (const std::string& r : rows_) w0 = std::max(w0, r.size());
  std::string out;
  char buf[64];
  auto cell = [&](const std::string& s) {
    std::snprintf(buf, sizeof buf, " %7s", s.c_str());
    out += buf;
  };
  auto first = [&](const std::string& s) { out += s + std::string(w0 - s.size(), ' '); };
  first(row_header);
  for (int64_t c : contexts_) cell(context_label(c));
  out += '\n';
  for (size_t r = 0; r < rows_.size(); ++r) {
    first(rows_[r]);
    for (size_t c = 0; c < contexts_.size(); ++c) cell(fixed(score(r, c)));
    out += '\n';
  }
  first("mean");
  for (size_t c = 0; c < contexts_.size(); ++c) cell(fixed(context_mean(c)));
  out += '\n';
  return out;
}

nlohmann::ordered_json ScoreTable::to_json(const std::string& row_key) const {
  auto num = [](double x) { return std::isnan(x) ? nlohmann::ordered_json() : nlohmann::ordered_json(x); };
  nlohmann::ordered_json scores = nlohmann::ordered_json::object(), mean = nlohmann::ordered_json::object();
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (size_t r = 0; r < rows_.size(); ++r) {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    for (size_t c = 0; c < contexts_.size(); ++c) {
      row[std::to_string(contexts_[c])] = num(score(r, c));
      const Cell& cell = cells_[r * contexts_.size() + c];
      if (cell.n == 0) continue;
      cells.push_back({{row_key, rows_[r]},
                       {"context", contexts_[c]},
                       {"score", score(r, c)},
                       {"samples", cell.n},
                       {"passed", cell.passed},
                       {"mean_prompt_tokens", round2(static_cast<double>(cell.prompt_tokens) / static_cast<double>(cell.n))}});
    }
    scores[rows_[r]] = std::move(row);
  }
  for (size_t c = 0; c < contexts_.size(); ++c) mean[std::to_string(contexts_[c])] = num(context_mean(c));
  nlohmann::ordered_json j;
  j["scores"] = std::move(scores);
  j["mean"] = std::move(mean);
  j["overall"] = num(overall_mean());
  j["cells"] = std::move(cells);
  return j;
}

}  // namespace nanovllm::eval
