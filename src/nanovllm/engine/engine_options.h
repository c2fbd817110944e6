// Every engine setting, declared once: its name (the Python keyword; the CLI flag is --name with dashes unless
// it says otherwise), the EngineConfig field it sets, its kind, range and help. The default is EngineConfig{}'s.
// The CLI's flags (tools/cli/engine_options.cpp), the Python keywords (python/src/engine_config.cpp), the range
// checks (EngineConfig::validate) and the README's option table (engine_options_markdown, checked by a test) are
// all made from this table: a new option is one row here plus its field in a sub-config.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "nanovllm/engine/config.h"

namespace nanovllm {

using OptionValue = std::variant<int64_t, double, bool, std::string>;

struct EngineOption {
  enum class Kind { kInt, kReal, kFlag, kText };
  std::string name;   // "max_num_seqs": the Python keyword, and the field's name in messages
  std::string group;  // the sub-config it belongs to ("scheduler"), for the README table
  Kind kind = Kind::kInt;
  std::string help;
  // kInt / kReal: the accepted range, inclusive (min_exclusive: "> min").
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::function<std::string()> choices;  // kText with a fixed set of values: "a | b"; nullptr: free text
  std::string default_text;              // shown instead of EngineConfig{}'s value where that is a placeholder
  // The CLI's spelling where it differs from --name: other flag names ("--engine-seed"; extra names are aliases),
  // a unit (--kv-cache-gib takes GiB: config value = CLI value x cli_scale), a negated switch (--no-prefix-caching
  // sets enable_prefix_caching false).
  std::vector<std::string> cli_flags;
  double cli_scale = 1;
  bool cli_negated = false;
  std::vector<std::string> python_aliases;  // nano-vLLM's keywords

  std::function<OptionValue(const EngineConfig&)> get;
  std::function<void(EngineConfig&, const OptionValue&)> set;  // the value must have the option's kind

  std::string flag() const;  // the CLI's first name: "--max-num-seqs"
  OptionValue default_value() const { return get(EngineConfig{}); }
  std::string format(const OptionValue& v) const;  // "8192", "0.9", "true", "full"
  // Throws nanovllm::Error naming the option when v is outside its range or choices.
  void check(const OptionValue& v) const;
};

const std::vector<EngineOption>& engine_options();
// By Python keyword (or alias); nullptr when none has that name.
const EngineOption* find_engine_option(std::string_view name);
// The range and choice checks of every option on c (EngineConfig::validate runs them).
void check_engine_option_ranges(const EngineConfig& c);
// The README's table of engine options (markdown), made from the table.
std::string engine_options_markdown();

}  // namespace nanovllm
