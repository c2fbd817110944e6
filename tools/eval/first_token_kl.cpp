#include "eval/first_token_kl.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "eval/kl.h"
#include "eval/report.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

std::string hex16(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

uint64_t parse_hex16(const std::string& s) {
  NANOVLLM_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos,
                 "prompt_fingerprint '", s, "' is not 16 hex digits");
  return std::stoull(s, nullptr, 16);
}

FirstToken parse_first_token(const nlohmann::json& sample) {
  const nlohmann::json& f = sample.at("first_token");
  FirstToken t;
  t.key = {f.at("row").get<std::string>(), sample.at("context").get<int64_t>(), sample.at("index").get<int64_t>()};
  t.prompt_fingerprint = parse_hex16(f.at("prompt_fingerprint").get<std::string>());
  const auto ids = f.at("ids").get<std::vector<int64_t>>();
  const auto logprobs = f.at("logprobs").get<std::vector<float>>();
  NANOVLLM_CHECK(!ids.empty() && ids.size() == logprobs.size(), "first_token of ", to_string(t.key), ": ", ids.size(),
                 " ids and ", logprobs.size(), " logprobs");
  for (size_t i = 0; i < ids.size(); ++i) t.logprobs.push_back({ids[i], logprobs[i]});
  return t;
}

nlohmann::ordered_json stats_json(const KlStats& s) {
  return {{"mean", s.mean()}, {"max", s.max}, {"samples", s.samples}, {"top1_agreement", s.top1_agreement()}};
}

}  // namespace

std::string to_string(const SampleKey& key) {
  return key.row + " at " + std::to_string(key.context) + " #" + std::to_string(key.index);
}

uint64_t prompt_fingerprint(const std::vector<int32_t>& prompt_ids) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (int32_t id : prompt_ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (u >> (8 * byte)) & 0xffu;
      h *= 0x100000001b3ull;  // FNV 64 prime
    }
  }
  return h;
}

nlohmann::ordered_json first_token_json(const FirstToken& t) {
  nlohmann::ordered_json ids = nlohmann::ordered_json::array(), logprobs = nlohmann::ordered_json::array();
  for (const TokenLogprob& lp : t.logprobs) ids.push_back(lp.id), logprobs.push_back(lp.logprob);
  return {{"row", t.key.row},
          {"prompt_fingerprint", hex16(t.prompt_fingerprint)},
          {"ids", std::move(ids)},
          {"logprobs", std::move(logprobs)}};
}

FirstTokenReference load_first_token_reference(const std::string& path) {
  std::ifstream f(path);
  NANOVLLM_CHECK(f.good(), "--kl-reference: cannot read ", path);
  FirstTokenReference ref;
  ref.path = path;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    ref.command = j.at("command").get<std::string>();
    ref.k = j.value("first_token_logprobs", int64_t{0});
    NANOVLLM_CHECK(ref.k > 0, "it has no first-token logprobs; write it with --first-token-logprobs K");
    for (const nlohmann::json& sample : j.at("samples")) {
      FirstToken t = parse_first_token(sample);
      const SampleKey key = t.key;
      NANOVLLM_CHECK(ref.samples.emplace(key, std::move(t)).second, "sample ", to_string(key), " appears twice");
    }
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL("--kl-reference ", path, ": not an eval --json-out file (", e.what(), ")");
  } catch (const Error& e) {  // the checks above name the problem, this names the file
    throw e.prefixed("--kl-reference " + path + ": ");
  }
  NANOVLLM_CHECK(!ref.samples.empty(), "--kl-reference ", path, ": no samples");
  return ref;
}

void KlStats::add(double kl, bool same_top) {
  ++samples;
  top1_agree += same_top ? 1 : 0;
  sum += kl;
  max = std::max(max, kl);
}

void check_reference_matches(const FirstTokenReference& reference, const std::string& command,
                             const std::vector<FirstToken>& run) {
  NANOVLLM_CHECK(reference.command == command, "--kl-reference ", reference.path, " is an 'eval ", reference.command,
                 "' run; this is 'eval ", command, "'");
  int64_t matched = 0;
  for (const FirstToken& t : run) {
    const auto it = reference.samples.find(t.key);
    if (it == reference.samples.end()) continue;
    NANOVLLM_CHECK(it->second.prompt_fingerprint == t.prompt_fingerprint, "--kl-reference ", reference.path,
                   ": the prompt of ", to_string(t.key),
                   " differs from this run's (another tokenizer, seed, template or haystack?)");
    ++matched;
  }
  NANOVLLM_CHECK(matched > 0, "--kl-reference ", reference.path,
                 ": none of its samples is one of this run's (compare runs with the same --tasks/--task, --depths, "
                 "--context and --samples)");
}

FirstTokenKl compare_first_tokens(const FirstTokenReference& reference, const std::string& command,
                                  const std::vector<FirstToken>& run, const std::vector<int64_t>& contexts,
                                  int64_t k) {
  check_reference_matches(reference, command, run);
  FirstTokenKl out;
  out.reference_path = reference.path;
  out.k = k;
  out.reference_k = reference.k;
  out.contexts = contexts;
  out.by_context.resize(contexts.size());
  for (const FirstToken& t : run) {
    const auto it = reference.samples.find(t.key);
    if (it == reference.samples.end()) {
      ++out.unmatched;
      continue;
    }
    const FirstToken& r = it->second;
    const double kl = partition_kl_lower_bound(r.logprobs, t.logprobs);
    const bool same_top = top_token(r.logprobs) == top_token(t.logprobs);
    const auto c = std::find(contexts.begin(), contexts.end(), t.key.context);
    NANOVLLM_CHECK(c != contexts.end(), "compare_first_tokens: context ", t.key.context, " is not one of the run's");
    out.by_context[static_cast<size_t>(c - contexts.begin())].add(kl, same_top);
    out.overall.add(kl, same_top);
  }
  return out;
}

std::string FirstTokenKl::format() const {
  std::string out;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "first-token KL(reference || this run) in nats, a lower bound from top-%lld lists (reference top-%lld):"
                " %s\n",
                static_cast<long long>(k), static_cast<long long>(reference_k), reference_path.c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "%-8s %8s %11s %11s %12s\n", "context", "samples", "mean KL", "max KL", "top-1 agree");
  out += buf;
  auto line = [&](const std::string& label, const KlStats& s) {
    if (s.samples == 0) return;
    std::snprintf(buf, sizeof buf, "%-8s %8lld %11.3e %11.3e %11.1f%%\n", label.c_str(),
                  static_cast<long long>(s.samples), s.mean(), s.max, 100.0 * s.top1_agreement());
    out += buf;
  };
  for (size_t c = 0; c < contexts.size(); ++c) line(context_label(contexts[c]), by_context[c]);
  line("overall", overall);
  if (unmatched > 0) {
    std::snprintf(buf, sizeof buf, "(%lld samples of this run are not in the reference)\n",
                  static_cast<long long>(unmatched));
    out += buf;
  }
  return out;
}

nlohmann::ordered_json FirstTokenKl::to_json() const {
  nlohmann::ordered_json by = nlohmann::ordered_json::object();
  for (size_t c = 0; c < contexts.size(); ++c)
    if (by_context[c].samples > 0) by[std::to_string(contexts[c])] = stats_json(by_context[c]);
  return {{"reference", reference_path}, {"K", k},        {"reference_K", reference_k}, {"contexts", std::move(by)},
          {"overall", stats_json(overall)}, {"unmatched", unmatched}};
}

}  // namespace nanovllm::eval
