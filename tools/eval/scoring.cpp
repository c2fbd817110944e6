#include "eval/scoring.h"

#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool contains(const std::string& lowered_prediction, const std::string& reference) {
  return lowered_prediction.find(ascii_lower(reference)) != std::string::npos;
}

// Python's str.strip() for the ASCII whitespace it removes (space, \t \n \v \f \r, and \x1c-\x1f).
std::string_view strip(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string postprocess_prediction(std::string_view prediction) {
  std::string out(strip(prediction));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  return std::string(strip(out));
}

double string_match_all(std::string_view prediction, const std::vector<std::string>& references) {
  NANOVLLM_CHECK(!references.empty(), "string_match_all: no references");
  const std::string p = ascii_lower(prediction);
  int found = 0;
  for (const std::string& r : references) found += contains(p, r) ? 1 : 0;
  return static_cast<double>(found) / static_cast<double>(references.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& references) {
  NANOVLLM_CHECK(!references.empty(), "string_match_part: no references");
  const std::string p = ascii_lower(prediction);
  for (const std::string& r : references)
    if (contains(p, r)) return 1.0;
  return 0.0;
}

double score_prediction(Metric metric, std::string_view prediction, const std::vector<std::string>& references) {
  const std::string p = postprocess_prediction(prediction);
  return metric == Metric::kStringMatchAll ? string_match_all(p, references) : string_match_part(p, references);
}

}  // namespace nanovllm::eval
