// Variable tracking (RULER's variable_tracking.py): a chain "VAR A = 12345", "VAR B = VAR A", ... hidden
// among noise lines; the question asks for every variable holding the value. An in-context example of
// the same task, with its answer, comes first (RULER's few-shot example).
#include <algorithm>

#include "eval/draft.h"
#include "eval/templates.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

std::string random_upper(Rng& rng, int k) {
  std::string s;
  for (int i = 0; i < k; ++i) s.push_back(static_cast<char>('A' + rng.below(26)));
  return s;
}

struct Chains {
  std::vector<std::vector<std::string>> vars;        // [num_chains][num_hops + 1]
  std::vector<std::vector<std::string>> statements;  // [num_chains][num_hops + 1]
  std::vector<std::vector<double>> positions;        // [num_chains][num_hops + 1] sorted fractions
};

Chains make_chains(Rng& rng, int num_chains, int num_hops, int name_len) {
  std::vector<std::string> names;
  while (static_cast<int>(names.size()) < num_chains * (num_hops + 1)) {
    std::string v = random_upper(rng, name_len);
    if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(std::move(v));
  }
  Chains c;
  for (int i = 0; i < num_chains; ++i) {
    std::vector<std::string> vars(names.begin() + i * (num_hops + 1), names.begin() + (i + 1) * (num_hops + 1));
    std::vector<std::string> chain = {"VAR " + vars[0] + " = " + std::to_string(rng.range(10000, 99999))};
    for (int j = 0; j < num_hops; ++j) chain.push_back("VAR " + vars[j + 1] + " = VAR " + vars[j] + " ");
    std::vector<double> pos;
    for (size_t j = 0; j < chain.size(); ++j) pos.push_back(rng.uniform());
    std::sort(pos.begin(), pos.end());
    c.vars.push_back(std::move(vars));
    c.statements.push_back(std::move(chain));
    c.positions.push_back(std::move(pos));
  }
  return c;
}

// RULER: `units` noise lines, each chain's statements inserted in order at sorted positions of the growing
// list, " ".join(...) and ". \n" -> ".\n".
std::string render_context(const Chains& c, int64_t units) {
  const std::string noise = std::string(templates::kNoise) + "\n";
  std::vector<const std::string*> lines(static_cast<size_t>(units), &noise);
  for (size_t ci = 0; ci < c.statements.size(); ++ci) {
    const size_t n = lines.size();
    for (size_t j = 0; j < c.statements[ci].size(); ++j) {
      const size_t at = std::min(n, static_cast<size_t>(static_cast<double>(n) * c.positions[ci][j])) + j;
      lines.insert(lines.begin() + static_cast<ptrdiff_t>(at), &c.statements[ci][j]);
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += ' ';
    out += *lines[i];
  }
  return templates::replace_all(out, ". \n", ".\n");
}

std::string value_of(const Chains& c) {  // "VAR A = 12345" -> "12345"
  const std::string& s = c.statements[0][0];
  return s.substr(s.rfind('=') + 2);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

Draft make_variable_tracking(const TaskConfig& task, Rng& rng, const DraftInputs& in) {
  NANOVLLM_CHECK(task.num_chains >= 1 && task.num_hops >= 1, task.name, ": needs chains and hops");
  const std::string num_v = std::to_string(task.num_hops + 1);

  // The in-context example: 3-letter names (as RULER's ICL example), a short noise context, its answer.
  const Chains icl = make_chains(rng, task.num_chains, task.num_hops, 3);
  const int64_t icl_units = in.context >= 4096 && !in.compact ? 5 : 1;
  const std::string icl_text =
      templates::format(templates::kVariableTracking, {{"context", render_context(icl, icl_units)}, {"query", value_of(icl)}}) +
      templates::format(templates::kVariableTrackingAnswerPrefix, {{"num_v", num_v}, {"query", value_of(icl)}}) + " " +
      join(icl.vars[0], " ") + "\n";

  const Chains chains = make_chains(rng, task.num_chains, task.num_hops, 5);
  const std::string query = value_of(chains);
  Draft d;
  d.answers = chains.vars[0];
  d.target = join(chains.vars[0], " ");
  d.answer_prefix = templates::format(templates::kVariableTrackingAnswerPrefix, {{"num_v", num_v}, {"query", query}});
  d.min_units = 1;
  d.render = [icl_text, chains, query](int64_t units) {
    return icl_text + "\n" +
           templates::format(templates::kVariableTracking, {{"context", render_context(chains, units)}, {"query", query}});
  };
  return d;
}

}  // namespace nanovllm::eval
