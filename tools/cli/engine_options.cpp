#include "engine_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/device.h"
#include "option_checks.h"

namespace nanovllm::cli {

namespace {

// The flag's value in the config's unit and kind (a scaled flag: a real number of GiB for an integer of bytes).
OptionValue config_value(const EngineOptions::Flag& f) {
  const EngineOption& o = *f.option;
  if (o.cli_negated) return !std::get<bool>(f.value);
  if (o.cli_scale == 1) return f.value;
  const double v = std::get<double>(f.value) * o.cli_scale;
  if (o.kind == EngineOption::Kind::kInt) return static_cast<int64_t>(std::llround(v));
  return v;
}

// The CLI11 range check of a numeric flag: the option's range in the flag's unit.
CLI::Validator range_of(const EngineOption& o) {
  const double lo = o.min / o.cli_scale, hi = o.max / o.cli_scale;
  if (std::isinf(hi)) return o.min_exclusive ? greater_than(lo) : at_least(lo);
  return o.min_exclusive ? in_range_above(lo, hi) : in_range(lo, hi);
}

}  // namespace

void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional) {
  // "model,--model": CLI11 takes it as the first positional argument or as --model.
  cmd.add_option(model_positional ? "model,--model" : "--model", o.model,
                 "Hugging Face model directory (config.json, *.safetensors)")
      ->required();
  size_t n = 0;
  for (const EngineOption& opt : engine_options()) n += std::max<size_t>(1, opt.cli_flags.size());
  o.flags.clear();
  o.flags.reserve(n);  // CLI11 binds to the values: no reallocation after this
  for (const EngineOption& opt : engine_options()) {
    const std::vector<std::string> names = opt.cli_flags.empty() ? std::vector<std::string>{opt.flag()} : opt.cli_flags;
    for (const std::string& name : names) {
      EngineOptions::Flag& f = o.flags.emplace_back();
      f.option = &opt;
      f.name = name;
      std::string help = opt.help;
      if (opt.choices) help += ": " + opt.choices();
      if (name != names.front()) help = "the same as " + names.front();
      const OptionValue def = opt.default_value();
      const std::string def_text = opt.default_text.empty() ? opt.format(def) : opt.default_text;
      if (opt.cli_negated) {
        f.value = false;
        f.parsed = cmd.add_flag(name, std::get<bool>(f.value), help);
      } else if (opt.kind == EngineOption::Kind::kFlag) {
        f.value = false;
        f.parsed = cmd.add_flag(name, std::get<bool>(f.value), help);
      } else if (opt.cli_scale != 1) {
        f.value = 0.0;
        f.parsed = cmd.add_option(name, std::get<double>(f.value), help)->check(range_of(opt));
        f.parsed->default_str(opt.format(OptionValue(std::get<int64_t>(def) / static_cast<int64_t>(opt.cli_scale))));
      } else if (opt.kind == EngineOption::Kind::kInt) {
        f.value = int64_t{0};
        f.parsed = cmd.add_option(name, std::get<int64_t>(f.value), help)->check(range_of(opt));
        f.parsed->default_str(def_text);
      } else if (opt.kind == EngineOption::Kind::kReal) {
        f.value = 0.0;
        f.parsed = cmd.add_option(name, std::get<double>(f.value), help)->check(range_of(opt));
        f.parsed->default_str(def_text);
      } else {
        f.value = std::string();
        f.parsed = cmd.add_option(name, std::get<std::string>(f.value), help);
        f.parsed->default_str(def_text);
      }
    }
  }
}

void add_sampling_options(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--max-tokens", o.max_tokens, "tokens to generate per prompt")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--min-tokens", o.min_tokens, "EOS/stop ids are suppressed until this many tokens")
      ->check(at_least(0));
  cmd.add_option("--temperature", o.temperature, "0 = greedy")->check(at_least(0))->capture_default_str();
  cmd.add_option("--top-k", o.top_k, "-1 = off")->check(at_least(-1));
  cmd.add_option("--top-p", o.top_p, "nucleus sampling mass")->check(in_range_above(0, 1));
  cmd.add_option("--min-p", o.min_p, "drop tokens below min_p * max probability")->check(in_range(0, 1));
  cmd.add_option("--repetition-penalty", o.repetition_penalty)->check(greater_than(0));
  cmd.add_option("--presence-penalty", o.presence_penalty)->check(in_range(-2, 2));
  cmd.add_option("--frequency-penalty", o.frequency_penalty)->check(in_range(-2, 2));
  cmd.add_option("--seed", o.seed, "per-request sampling seed")->check(at_least(-1));
  cmd.add_flag("--ignore-eos", o.ignore_eos, "keep generating past EOS");
  cmd.add_option("--logprobs", o.logprobs, "return the top-K logprobs of each generated token")->check(in_range(0, 20));
  cmd.add_option("--stop-token-ids", o.stop_token_ids, "extra token ids that end generation")
      ->delimiter(',')
      ->check(at_least(0));
  cmd.add_option("--logit-bias", o.logit_bias,
                 "ID:BIAS,...: add BIAS (in [-100, 100]) to token ID's logit before sampling (-100 bans it)")
      ->delimiter(',');
}

EngineConfig EngineOptions::to_config() const {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = default_backend();
  std::map<const EngineOption*, const Flag*> given;  // the flag that set each option
  for (const Flag& f : flags) {
    if (f.parsed == nullptr || f.parsed->count() == 0) continue;
    const OptionValue v = config_value(f);
    if (const auto [it, first] = given.emplace(f.option, &f); !first) {
      NANOVLLM_CHECK(config_value(*it->second) == v, it->second->name, " ", it->second->option->format(config_value(*it->second)),
                     " and ", f.name, " ", f.option->format(v), " disagree: they set the same option (",
                     f.option->name, ")");
      continue;
    }
    try {
      f.option->check(v);
    } catch (const Error& e) {
      throw e.prefixed(f.name + ": ");
    }
    f.option->set(c, v);
  }
  return c;
}

SamplingParams SamplingOptions::to_params() const {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.min_tokens = min_tokens;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  p.ignore_eos = ignore_eos;
  p.logprobs = logprobs;
  p.stop_token_ids = stop_token_ids;
  NANOVLLM_CHECK(min_tokens <= max_tokens, "--min-tokens (", min_tokens, ") must be <= --max-tokens (", max_tokens,
                 ")");
  p.logit_bias = parse_logit_bias(logit_bias);
  return p;
}

void SamplingOptions::check_token_ids(const SamplingParams& params, int64_t vocab_size) {
  for (int64_t id : params.stop_token_ids)
    NANOVLLM_CHECK(id < vocab_size, "--stop-token-ids: token id ", id, " is outside the model's vocabulary [0, ",
                   vocab_size, ")");
  for (const auto& [id, bias] : params.logit_bias)
    NANOVLLM_CHECK(id < vocab_size, "--logit-bias: token id ", id, " is outside the model's vocabulary [0, ",
                   vocab_size, ")");
}

std::map<int32_t, float> parse_logit_bias(const std::vector<std::string>& items, const std::string& option) {
  auto trim = [](const std::string& t) {
    const size_t b = t.find_first_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, t.find_last_not_of(" \t") - b + 1);
  };
  std::map<int32_t, float> bias;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::string id_text = trim(item.substr(0, colon));
    const std::string value = colon == std::string::npos ? std::string() : trim(item.substr(colon + 1));
    char* id_end = nullptr;
    char* value_end = nullptr;
    const long long id = std::strtoll(id_text.c_str(), &id_end, 10);
    const double b = std::strtod(value.c_str(), &value_end);
    const bool digits = !id_text.empty() && id_text.find_first_not_of("0123456789") == std::string::npos;
    NANOVLLM_CHECK(digits && *id_end == '\0' && !value.empty() && *value_end == '\0', option,
                   ": expected ID:BIAS items separated by commas (e.g. 42:-100), got '", item, "'");
    NANOVLLM_CHECK(id <= INT32_MAX, option, ": token id ", id_text, " is too large");
    NANOVLLM_CHECK(b >= -kMaxLogitBias && b <= kMaxLogitBias, option, ": the bias of token ", id,
                   " must be in [-100, 100], got ", value);
    NANOVLLM_CHECK(bias.emplace(static_cast<int32_t>(id), static_cast<float>(b)).second, option, ": token ", id,
                   " is given twice");
  }
  NANOVLLM_CHECK(bias.size() <= kMaxLogitBiasEntries, option, ": ", bias.size(), " tokens; at most ",
                 kMaxLogitBiasEntries, " may be biased");
  return bias;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    NANOVLLM_CHECK(j > i && j - i <= 10, option, ": expected comma-separated non-negative integers, got '", text,
                   "'");
    const long long v = std::strtoll(text.substr(i, j - i).c_str(), nullptr, 10);
    NANOVLLM_CHECK(v <= INT32_MAX, option, ": token id ", text.substr(i, j - i), " is too large");
    ids.push_back(static_cast<int32_t>(v));
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
    if (j < text.size()) {
      NANOVLLM_CHECK(text[j] == ',' && j + 1 < text.size(), option, ": expected comma-separated integers, got '",
                     text, "'");
      ++j;
    }
    i = j;
  }
  NANOVLLM_CHECK(!ids.empty(), option, ": empty list");
  return ids;
}

std::vector<std::vector<int32_t>> read_token_id_lists(const std::string& path) {
  std::ifstream f(path);
  NANOVLLM_CHECK(f.good(), "cannot read ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL(path, ": invalid JSON: ", e.what());
  }
  NANOVLLM_CHECK(j.is_array(), path, ": expected a JSON list of token-id lists");
  std::vector<std::vector<int32_t>> lists;
  for (const auto& item : j) {
    NANOVLLM_CHECK(item.is_array(), path, ": entry ", lists.size(), " is not a list of token ids");
    std::vector<int32_t> ids;
    for (const auto& id : item) {
      NANOVLLM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX, path,
                     ": entry ", lists.size(), " holds a value that is not a token id: ", id.dump());
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    lists.push_back(std::move(ids));
  }
  return lists;
}

}  // namespace nanovllm::cli
