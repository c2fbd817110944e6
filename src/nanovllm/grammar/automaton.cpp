#include "nanovllm/grammar/automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/utf8.h"

namespace nanovllm::grammar {
namespace {

// ---- Thompson NFA of one rule ------------------------------------------------------------------------

struct Nfa {
  struct ByteEdge {
    uint8_t lo, hi;
    int32_t target;
  };
  struct CallEdge {
    int32_t rule, target;
  };
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<ByteEdge>> bytes;
  std::vector<std::vector<CallEdge>> calls;
  const std::string* rule_name = nullptr;

  int32_t add_state() {
    NANOVLLM_CHECK(static_cast<int64_t>(eps.size()) < kMaxAutomatonStates, "grammar: rule '", *rule_name,
                   "' is too large (more than ", kMaxAutomatonStates, " automaton states; lower its repetition counts)");
    eps.emplace_back();
    bytes.emplace_back();
    calls.emplace_back();
    return static_cast<int32_t>(eps.size() - 1);
  }
  void add_eps(int32_t from, int32_t to) { eps[static_cast<size_t>(from)].push_back(to); }

  // Adds `e` after state `from`; returns the state where it ends.
  int32_t build(const Expr& e, int32_t from) {
    switch (e.kind) {
      case Expr::Kind::kEmpty: return from;
      case Expr::Kind::kBytes: {
        int32_t cur = from;
        for (unsigned char c : e.bytes) {
          const int32_t next = add_state();
          bytes[static_cast<size_t>(cur)].push_back({c, c, next});
          cur = next;
        }
        return cur;
      }
      case Expr::Kind::kClass: {
        const int32_t end = add_state();
        for (const ByteRangeSeq& s : utf8_byte_ranges(e.ranges)) {
          int32_t cur = from;
          for (int i = 0; i < s.length; ++i) {
            const int32_t next = i + 1 == s.length ? end : add_state();
            bytes[static_cast<size_t>(cur)].push_back({s.lo[static_cast<size_t>(i)], s.hi[static_cast<size_t>(i)], next});
            cur = next;
          }
        }
        return end;
      }
      case Expr::Kind::kRule: {
        const int32_t end = add_state();
        calls[static_cast<size_t>(from)].push_back({e.rule, end});
        return end;
      }
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (const Expr& item : e.items) cur = build(item, cur);
        return cur;
      }
      case Expr::Kind::kAlt: {
        const int32_t end = add_state();
        for (const Expr& item : e.items) {
          const int32_t start = add_state();
          add_eps(from, start);
          add_eps(build(item, start), end);
        }
        return end;
      }
      case Expr::Kind::kRepeat: {
        const Expr& inner = e.items[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {  // a fresh copy per required repetition
          const int32_t start = add_state();
          add_eps(cur, start);
          cur = build(inner, start);
        }
        if (e.max < 0) {
          const int32_t loop = add_state();
          add_eps(cur, loop);
          const int32_t start = add_state();
          add_eps(loop, start);
          add_eps(build(inner, start), loop);
          return loop;
        }
        const int32_t end = add_state();
        add_eps(cur, end);
        for (int32_t i = e.min; i < e.max; ++i) {
          const int32_t start = add_state();
          add_eps(cur, start);
          cur = build(inner, start);
          add_eps(cur, end);
        }
        return end;
      }
    }
    return from;
  }
};

// ---- subset construction -----------------------------------------------------------------------------

struct DfaState {
  std::vector<std::pair<std::pair<uint8_t, uint8_t>, int32_t>> bytes;  // ([lo, hi], local target), sorted
  std::vector<std::pair<int32_t, int32_t>> calls;                      // (callee rule, local target)
  bool accepting = false;
};

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};

std::vector<DfaState> determinize(const Nfa& nfa, int32_t start, int32_t final_state, int64_t budget) {
  std::vector<DfaState> dfa;
  std::vector<std::vector<int32_t>> sets;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
  std::vector<uint32_t> mark(nfa.eps.size(), 0);
  uint32_t epoch = 0;
  auto closure = [&](std::vector<int32_t> seeds) {
    ++epoch;
    std::vector<int32_t> out;
    while (!seeds.empty()) {
      const int32_t s = seeds.back();
      seeds.pop_back();
      if (mark[static_cast<size_t>(s)] == epoch) continue;
      mark[static_cast<size_t>(s)] = epoch;
      out.push_back(s);
      for (int32_t t : nfa.eps[static_cast<size_t>(s)]) seeds.push_back(t);
    }
    // Only states with outgoing edges or the final state tell DFA states apart.
    std::erase_if(out, [&](int32_t s) {
      const auto u = static_cast<size_t>(s);
      return s != final_state && nfa.bytes[u].empty() && nfa.calls[u].empty();
    });
    std::sort(out.begin(), out.end());
    return out;
  };
  auto intern = [&](std::vector<int32_t> set) {
    auto [it, inserted] = ids.emplace(set, static_cast<int32_t>(sets.size()));
    if (inserted) {
      NANOVLLM_CHECK(static_cast<int64_t>(sets.size()) < budget, "grammar: rule '", *nfa.rule_name,
                     "' is too large (more than ", kMaxAutomatonStates, " automaton states; lower its repetition counts)");
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  intern(closure({start}));
  std::vector<uint16_t> boundaries;
  for (size_t d = 0; d < sets.size(); ++d) {
    DfaState out;
    const std::vector<int32_t> set = sets[d];  // sets may grow (reallocate) below
    boundaries.clear();
    std::map<int32_t, std::vector<int32_t>> call_targets;
    for (int32_t s : set) {
      const auto u = static_cast<size_t>(s);
      out.accepting |= s == final_state;
      for (const Nfa::ByteEdge& e : nfa.bytes[u]) {
        boundaries.push_back(e.lo);
        boundaries.push_back(static_cast<uint16_t>(e.hi + 1));
      }
      for (const Nfa::CallEdge& c : nfa.calls[u]) call_targets[c.rule].push_back(c.target);
    }
    std::sort(boundaries.begin(), boundaries.end());
    boundaries.erase(std::unique(boundaries.begin(), boundaries.end()), boundaries.end());
    for (size_t k = 0; k + 1 < boundaries.size(); ++k) {
      const uint16_t lo = boundaries[k], hi = static_cast<uint16_t>(boundaries[k + 1] - 1);
      std::vector<int32_t> targets;
      for (int32_t s : set)
        for (const Nfa::ByteEdge& e : nfa.bytes[static_cast<size_t>(s)])
          if (e.lo <= lo && hi <= e.hi) targets.push_back(e.target);
      if (targets.empty()) continue;
      const int32_t t = intern(closure(std::move(targets)));
      if (!out.bytes.empty() && out.bytes.back().second == t && out.bytes.back().first.second + 1 == lo) {
        out.bytes.back().first.second = static_cast<uint8_t>(hi);
      } else {
        out.bytes.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}, t});
      }
    }
    for (auto& [rule, targets] : call_targets) out.calls.emplace_back(rule, intern(closure(std::move(targets))));
    dfa.push_back(std::move(out));
  }
  return dfa;
}

// ---- inlining ----------------------------------------------------------------------------------------

// Rules whose text is regular (no rule references once their own references are inlined) are copied into
// the rules that use them when they are small or used once: a byte then never needs a push or pop there,
// and a token that runs past such a rule's end is decided in the caller's context instead of being
// "uncertain" in every mask. Large rules used in several places stay calls, so the automaton stays linear
// in the grammar. The result keeps only the rules still referenced from the root, renumbered.
constexpr int64_t kMaxInlinedSize = 128;        // any number of uses
constexpr int64_t kMaxInlinedOnceSize = 65536;  // one use

class Inliner {
 public:
  explicit Inliner(const Grammar& g) : g_(g), state_(g.rules().size(), kUnknown), inlined_(g.rules().size()) {
    uses_.assign(g.rules().size(), 0);
    for (const Rule& r : g.rules()) count_uses(r.body);
  }

  Grammar run() {
    for (size_t r = 0; r < g_.rules().size(); ++r) visit(static_cast<int32_t>(r));
    // The rules still referenced from the root, in first-use order.
    std::vector<int32_t> new_id(g_.rules().size(), -1), order{g_.root()};
    new_id[static_cast<size_t>(g_.root())] = 0;
    for (size_t i = 0; i < order.size(); ++i) collect_refs(body(order[i]), new_id, order);
    Grammar out;
    for (int32_t r : order) out.add_rule(g_.rule(r).name);
    for (size_t i = 0; i < order.size(); ++i) {
      Expr b = body(order[i]);
      renumber(b, new_id);
      out.set_body(static_cast<int32_t>(i), std::move(b));
    }
    out.set_root(0);
    return out;
  }

 private:
  enum State : uint8_t { kUnknown, kVisiting, kRegular, kKept };
  const Grammar& g_;
  std::vector<State> state_;
  std::vector<Expr> inlined_;  // each rule's body with regular references replaced
  std::vector<int32_t> uses_;  // references to each rule in the grammar

  void count_uses(const Expr& e) {
    if (e.kind == Expr::Kind::kRule && e.rule >= 0 && e.rule < static_cast<int32_t>(uses_.size()))
      ++uses_[static_cast<size_t>(e.rule)];
    for (const Expr& sub : e.items) count_uses(sub);
  }

  const Expr& body(int32_t r) const { return inlined_[static_cast<size_t>(r)]; }

  // Copies of a repeated part when it is unrolled into automaton states (an unbounded one: min + 1).
  static int64_t copies(const Expr& e) {
    return e.kind == Expr::Kind::kRepeat ? std::max<int64_t>(e.max < 0 ? e.min + 1 : e.max, 1) : 1;
  }
  // Roughly the automaton states an expression unrolls to.
  static int64_t size_of(const Expr& e) {
    int64_t n = 1 + static_cast<int64_t>(e.bytes.size() + e.ranges.size());
    for (const Expr& sub : e.items) n += size_of(sub) * copies(e);
    return n;
  }
  static bool has_refs(const Expr& e) {
    if (e.kind == Expr::Kind::kRule) return true;
    for (const Expr& sub : e.items)
      if (has_refs(sub)) return true;
    return false;
  }

  void visit(int32_t r) {
    const auto u = static_cast<size_t>(r);
    if (state_[u] != kUnknown) return;
    state_[u] = kVisiting;
    Expr b = g_.rule(r).body;
    substitute(b, 1);
    const int64_t size = size_of(b);
    const bool regular = r != g_.root() && !has_refs(b) && size <= kMaxInlinedOnceSize;
    inlined_[u] = std::move(b);
    state_[u] = regular ? kRegular : kKept;
  }

  // `multiplicity`: how many times the enclosing repetitions unroll this spot. A rule is copied in only while
  // the copies stay small (a rule called from inside a 1000-fold repetition stays one rule, called 1000 times).
  void substitute(Expr& e, int64_t multiplicity) {
    if (e.kind == Expr::Kind::kRule) {
      NANOVLLM_CHECK(e.rule >= 0 && e.rule < static_cast<int32_t>(g_.rules().size()), "grammar: reference to an undefined rule");
      visit(e.rule);  // a rule being visited (recursion) stays a reference
      const auto u = static_cast<size_t>(e.rule);
      if (state_[u] != kRegular) return;
      const int64_t size = size_of(inlined_[u]) * multiplicity;
      if (size <= kMaxInlinedSize || (uses_[u] <= 1 && size <= kMaxInlinedOnceSize)) e = inlined_[u];
      return;
    }
    for (Expr& sub : e.items) substitute(sub, std::min<int64_t>(multiplicity * copies(e), kMaxInlinedOnceSize + 1));
  }

  void collect_refs(const Expr& e, std::vector<int32_t>& new_id, std::vector<int32_t>& order) const {
    if (e.kind == Expr::Kind::kRule && new_id[static_cast<size_t>(e.rule)] < 0) {
      new_id[static_cast<size_t>(e.rule)] = static_cast<int32_t>(order.size());
      order.push_back(e.rule);
    }
    for (const Expr& sub : e.items) collect_refs(sub, new_id, order);
  }
  static void renumber(Expr& e, const std::vector<int32_t>& new_id) {
    if (e.kind == Expr::Kind::kRule) e.rule = new_id[static_cast<size_t>(e.rule)];
    for (Expr& sub : e.items) renumber(sub, new_id);
  }
};

// ---- whole-grammar analyses --------------------------------------------------------------------------

class Assembler {
 public:
  explicit Assembler(const Grammar& g) : g_(g) {}

  PdaTables run() {
    NANOVLLM_CHECK(g_.root() >= 0 && g_.root() < static_cast<int32_t>(g_.rules().size()), "grammar: no root rule");
    build_states();
    assign_byte_classes();
    prune_dead_states();
    find_nullable_rules();
    check_left_recursion();
    compute_follow_sets();
    return std::move(t_);
  }

 private:
  const Grammar& g_;
  PdaTables t_;
  std::vector<std::vector<std::pair<std::pair<uint8_t, uint8_t>, int32_t>>> byte_edges_;  // global targets
  std::vector<uint8_t> nullable_;

  int32_t num_rules() const { return static_cast<int32_t>(g_.rules().size()); }

  void build_states() {
    const int32_t R = num_rules();
    t_.rule_start.resize(static_cast<size_t>(R));
    t_.rule_names.resize(static_cast<size_t>(R));
    std::vector<std::vector<std::pair<int32_t, int32_t>>> calls_of_state;
    int64_t total = 0;
    for (int32_t r = 0; r < R; ++r) {
      const Rule& rule = g_.rule(r);
      t_.rule_names[static_cast<size_t>(r)] = rule.name;
      check_refs(rule.body, rule.name);
      Nfa nfa;
      nfa.rule_name = &rule.name;
      const int32_t start = nfa.add_state();
      const int32_t final_state = nfa.build(rule.body, start);
      std::vector<DfaState> dfa = determinize(nfa, start, final_state, kMaxAutomatonStates - total);
      const auto offset = static_cast<int32_t>(total);
      t_.rule_start[static_cast<size_t>(r)] = offset;
      for (DfaState& d : dfa) {
        for (auto& e : d.bytes) e.second += offset;
        byte_edges_.push_back(std::move(d.bytes));
        std::vector<std::pair<int32_t, int32_t>> calls;
        for (auto [callee, target] : d.calls) calls.emplace_back(callee, target + offset);
        calls_of_state.push_back(std::move(calls));
        t_.flags.push_back(d.accepting ? PdaTables::kAccepting : 0);
        t_.state_rule.push_back(r);
      }
      total += static_cast<int64_t>(dfa.size());
    }
    // Calls point at the callee's start state.
    t_.call_begin.assign(1, 0);
    for (const auto& calls : calls_of_state) {
      for (auto [callee, target] : calls) t_.calls.push_back({t_.rule_start[static_cast<size_t>(callee)], target});
      t_.call_begin.push_back(static_cast<int32_t>(t_.calls.size()));
    }
    t_.root_start = t_.rule_start[static_cast<size_t>(g_.root())];
  }

  void check_refs(const Expr& e, const std::string& rule_name) const {
    if (e.kind == Expr::Kind::kRule)
      NANOVLLM_CHECK(e.rule >= 0 && e.rule < num_rules(), "grammar: rule '", rule_name, "' uses an undefined rule");
    for (const Expr& sub : e.items) check_refs(sub, rule_name);
  }

  // Bytes split into the coarsest classes that every state treats alike.
  void assign_byte_classes() {
    const size_t S = byte_edges_.size();
    // Elementary intervals: between any two boundaries of any state's edges.
    std::array<bool, 257> cut{};
    cut[0] = cut[256] = true;
    for (const auto& edges : byte_edges_)
      for (const auto& e : edges) {
        cut[e.first.first] = true;
        cut[static_cast<size_t>(e.first.second) + 1] = true;
      }
    std::array<int32_t, 256> interval_of{};
    int32_t num_intervals = 0;
    for (int b = 0; b < 256; ++b) {
      if (b > 0 && cut[static_cast<size_t>(b)]) ++num_intervals;
      interval_of[static_cast<size_t>(b)] = num_intervals;
    }
    ++num_intervals;
    std::vector<int32_t> table(S * static_cast<size_t>(num_intervals), -1);
    for (size_t s = 0; s < S; ++s)
      for (const auto& e : byte_edges_[s])
        for (int b = e.first.first; b <= e.first.second; ++b)
          table[s * static_cast<size_t>(num_intervals) + static_cast<size_t>(interval_of[static_cast<size_t>(b)])] = e.second;
    // Intervals with identical columns share a class (columns compared where their hashes agree).
    auto column = [&](int32_t i, size_t s) {
      return table[s * static_cast<size_t>(num_intervals) + static_cast<size_t>(i)];
    };
    std::vector<uint64_t> hash(static_cast<size_t>(num_intervals), 1469598103934665603ULL);
    for (size_t s = 0; s < S; ++s)
      for (int32_t i = 0; i < num_intervals; ++i)
        hash[static_cast<size_t>(i)] = (hash[static_cast<size_t>(i)] ^ static_cast<uint32_t>(column(i, s))) * 1099511628211ULL;
    std::vector<int32_t> class_of_interval(static_cast<size_t>(num_intervals), -1);
    std::vector<int32_t> representative;
    for (int32_t i = 0; i < num_intervals; ++i) {
      for (size_t c = 0; c < representative.size() && class_of_interval[static_cast<size_t>(i)] < 0; ++c) {
        const int32_t j = representative[c];
        if (hash[static_cast<size_t>(i)] != hash[static_cast<size_t>(j)]) continue;
        bool same = true;
        for (size_t s = 0; s < S && same; ++s) same = column(i, s) == column(j, s);
        if (same) class_of_interval[static_cast<size_t>(i)] = static_cast<int32_t>(c);
      }
      if (class_of_interval[static_cast<size_t>(i)] < 0) {
        class_of_interval[static_cast<size_t>(i)] = static_cast<int32_t>(representative.size());
        representative.push_back(i);
      }
    }
    t_.num_byte_classes = static_cast<int32_t>(representative.size());
    for (int b = 0; b < 256; ++b)
      t_.byte_class[static_cast<size_t>(b)] =
          static_cast<uint8_t>(class_of_interval[static_cast<size_t>(interval_of[static_cast<size_t>(b)])]);
    t_.next.assign(S * static_cast<size_t>(t_.num_byte_classes), -1);
    for (size_t s = 0; s < S; ++s)
      for (size_t c = 0; c < representative.size(); ++c)
        t_.next[s * representative.size() + c] =
            table[s * static_cast<size_t>(num_intervals) + static_cast<size_t>(representative[c])];
  }

  // Keeps only states that can still reach an accepting end (with the callees they call completing).
  void prune_dead_states() {
    const int32_t S = t_.num_states(), C = t_.num_byte_classes, R = num_rules();
    std::vector<std::vector<int32_t>> rev_bytes(static_cast<size_t>(S));
    std::vector<std::vector<int32_t>> call_sites_by_ret(static_cast<size_t>(S));      // call indices
    std::vector<std::vector<int32_t>> call_sites_by_callee(static_cast<size_t>(R));
    std::vector<int32_t> call_owner(t_.calls.size());
    std::vector<int32_t> rule_of_start(static_cast<size_t>(S), -1);
    for (int32_t r = 0; r < R; ++r) rule_of_start[static_cast<size_t>(t_.rule_start[static_cast<size_t>(r)])] = r;
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t c = 0; c < C; ++c) {
        const int32_t t = t_.next[static_cast<size_t>(s) * static_cast<size_t>(C) + static_cast<size_t>(c)];
        if (t >= 0) rev_bytes[static_cast<size_t>(t)].push_back(s);
      }
      for (int32_t k = t_.call_begin[static_cast<size_t>(s)]; k < t_.call_begin[static_cast<size_t>(s) + 1]; ++k) {
        const PdaCall& call = t_.calls[static_cast<size_t>(k)];
        call_owner[static_cast<size_t>(k)] = s;
        call_sites_by_ret[static_cast<size_t>(call.return_state)].push_back(k);
        call_sites_by_callee[static_cast<size_t>(t_.state_rule[static_cast<size_t>(call.callee_start)])].push_back(k);
      }
    }
    std::vector<uint8_t> live(static_cast<size_t>(S), 0), productive(static_cast<size_t>(R), 0);
    std::vector<int32_t> work;
    auto make_live = [&](int32_t s) {
      if (!live[static_cast<size_t>(s)]) {
        live[static_cast<size_t>(s)] = 1;
        work.push_back(s);
      }
    };
    for (int32_t s = 0; s < S; ++s)
      if (t_.flags[static_cast<size_t>(s)] & PdaTables::kAccepting) make_live(s);
    while (!work.empty()) {
      const int32_t t = work.back();
      work.pop_back();
      for (int32_t s : rev_bytes[static_cast<size_t>(t)]) make_live(s);
      for (int32_t k : call_sites_by_ret[static_cast<size_t>(t)]) {
        const int32_t callee = t_.state_rule[static_cast<size_t>(t_.calls[static_cast<size_t>(k)].callee_start)];
        if (productive[static_cast<size_t>(callee)]) make_live(call_owner[static_cast<size_t>(k)]);
      }
      const int32_t r = rule_of_start[static_cast<size_t>(t)];
      if (r >= 0 && !productive[static_cast<size_t>(r)]) {
        productive[static_cast<size_t>(r)] = 1;
        for (int32_t k : call_sites_by_callee[static_cast<size_t>(r)])
          if (live[static_cast<size_t>(t_.calls[static_cast<size_t>(k)].return_state)])
            make_live(call_owner[static_cast<size_t>(k)]);
      }
    }
    NANOVLLM_CHECK(productive[static_cast<size_t>(g_.root())], "grammar: the root rule '", g_.rule(g_.root()).name,
                   "' matches no finite text");
    for (auto& t : t_.next)
      if (t >= 0 && !live[static_cast<size_t>(t)]) t = -1;
    std::vector<PdaCall> kept;
    std::vector<int32_t> begin(1, 0);
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t k = t_.call_begin[static_cast<size_t>(s)]; k < t_.call_begin[static_cast<size_t>(s) + 1]; ++k) {
        const PdaCall& call = t_.calls[static_cast<size_t>(k)];
        if (live[static_cast<size_t>(call.return_state)] &&
            productive[static_cast<size_t>(t_.state_rule[static_cast<size_t>(call.callee_start)])])
          kept.push_back(call);
      }
      begin.push_back(static_cast<int32_t>(kept.size()));
    }
    t_.calls = std::move(kept);
    t_.call_begin = std::move(begin);
    for (int32_t s = 0; s < S; ++s) {
      bool reads = false;
      for (int32_t c = 0; c < C && !reads; ++c)
        reads = t_.next[static_cast<size_t>(s) * static_cast<size_t>(C) + static_cast<size_t>(c)] >= 0;
      if (reads) t_.flags[static_cast<size_t>(s)] |= PdaTables::kReadsBytes;
    }
  }

  template <typename F>
  void for_calls(int32_t s, F&& f) const {
    for (int32_t k = t_.call_begin[static_cast<size_t>(s)]; k < t_.call_begin[static_cast<size_t>(s) + 1]; ++k)
      f(t_.calls[static_cast<size_t>(k)]);
  }
  int32_t rule_of(int32_t state) const { return t_.state_rule[static_cast<size_t>(state)]; }

  // States reachable from `from` without reading a byte: through calls of nullable rules (to their return
  // states). Calls `visit(state)` for each, `from` included.
  template <typename F>
  void nullable_closure(int32_t from, F&& visit) const {
    std::vector<int32_t> work{from};
    std::vector<int32_t> seen{from};
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      visit(s);
      for_calls(s, [&](const PdaCall& c) {
        if (!nullable_[static_cast<size_t>(rule_of(c.callee_start))]) return;
        if (std::find(seen.begin(), seen.end(), c.return_state) != seen.end()) return;
        seen.push_back(c.return_state);
        work.push_back(c.return_state);
      });
    }
  }

  void find_nullable_rules() {
    nullable_.assign(static_cast<size_t>(num_rules()), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < num_rules(); ++r) {
        if (nullable_[static_cast<size_t>(r)]) continue;
        bool ends = false;
        nullable_closure(t_.rule_start[static_cast<size_t>(r)], [&](int32_t s) {
          ends |= (t_.flags[static_cast<size_t>(s)] & PdaTables::kAccepting) != 0;
        });
        if (ends) {
          nullable_[static_cast<size_t>(r)] = 1;
          changed = true;
        }
      }
    }
  }

  // A rule that can call itself before reading a byte would make the matcher's stack grow forever.
  void check_left_recursion() const {
    const int32_t R = num_rules();
    std::vector<std::vector<int32_t>> calls_at_start(static_cast<size_t>(R));
    for (int32_t r = 0; r < R; ++r)
      nullable_closure(t_.rule_start[static_cast<size_t>(r)], [&](int32_t s) {
        for_calls(s, [&](const PdaCall& c) { calls_at_start[static_cast<size_t>(r)].push_back(rule_of(c.callee_start)); });
      });
    std::vector<uint8_t> color(static_cast<size_t>(R), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> stack;
    for (int32_t root = 0; root < R; ++root) {
      if (color[static_cast<size_t>(root)]) continue;
      stack.emplace_back(root, 0);
      color[static_cast<size_t>(root)] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        const auto& out = calls_at_start[static_cast<size_t>(r)];
        if (i == out.size()) {
          color[static_cast<size_t>(r)] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t next = out[i++];
        NANOVLLM_CHECK(color[static_cast<size_t>(next)] != 1, "grammar: rule '", g_.rule(next).name,
                       "' is left-recursive (it can reach itself before matching any text); rewrite it with repetition");
        if (color[static_cast<size_t>(next)] == 0) {
          color[static_cast<size_t>(next)] = 1;
          stack.emplace_back(next, 0);
        }
      }
    }
  }

  // FOLLOW(rule): the bytes that may come right after the rule ends, over every place that calls it; and
  // whether its end may be the end of the whole match. Used to reject tokens that leave a rule for a byte
  // no caller accepts, without looking at the stack.
  void compute_follow_sets() {
    const int32_t R = num_rules(), C = t_.num_byte_classes;
    // FIRST(rule): bytes the rule may start with (fixpoint: rules start by calling rules).
    std::vector<ByteSet> first_rule(static_cast<size_t>(R));
    auto first_of_state = [&](int32_t from, bool& can_end) {
      ByteSet out;
      can_end = false;
      nullable_closure(from, [&](int32_t s) {
        if (t_.flags[static_cast<size_t>(s)] & PdaTables::kAccepting) can_end = true;
        for (int b = 0; b < 256; ++b)
          if (t_.next[static_cast<size_t>(s) * static_cast<size_t>(C) + t_.byte_class[static_cast<size_t>(b)]] >= 0)
            out.set(static_cast<uint8_t>(b));
        for_calls(s, [&](const PdaCall& c) { out.merge(first_rule[static_cast<size_t>(rule_of(c.callee_start))]); });
      });
      return out;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < R; ++r) {
        bool unused = false;
        changed |= first_rule[static_cast<size_t>(r)].merge(first_of_state(t_.rule_start[static_cast<size_t>(r)], unused));
      }
    }
    struct Site {
      int32_t callee, caller;
      ByteSet first;
      bool can_end;
    };
    std::vector<Site> sites;
    for (int32_t s = 0; s < t_.num_states(); ++s)
      for_calls(s, [&](const PdaCall& c) {
        Site site{rule_of(c.callee_start), rule_of(s), {}, false};
        site.first = first_of_state(c.return_state, site.can_end);
        sites.push_back(site);
      });
    t_.follow.assign(static_cast<size_t>(R), ByteSet{});
    t_.rule_can_end_root.assign(static_cast<size_t>(R), 0);
    t_.rule_can_end_root[static_cast<size_t>(g_.root())] = 1;
    for (bool changed = true; changed;) {
      changed = false;
      for (const Site& site : sites) {
        auto& follow = t_.follow[static_cast<size_t>(site.callee)];
        changed |= follow.merge(site.first);
        if (!site.can_end) continue;
        changed |= follow.merge(t_.follow[static_cast<size_t>(site.caller)]);
        if (t_.rule_can_end_root[static_cast<size_t>(site.caller)] && !t_.rule_can_end_root[static_cast<size_t>(site.callee)]) {
          t_.rule_can_end_root[static_cast<size_t>(site.callee)] = 1;
          changed = true;
        }
      }
    }
  }
};

}  // namespace

PdaTables compile_grammar(const Grammar& grammar) {
  NANOVLLM_CHECK(grammar.root() >= 0 && grammar.root() < static_cast<int32_t>(grammar.rules().size()),
                 "grammar: no root rule");
  const Grammar inlined = Inliner(grammar).run();
  return Assembler(inlined).run();
}

}  // namespace nanovllm::grammar
