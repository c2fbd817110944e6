// The engine's option table (engine/engine_options.h): one row per setting, from which the CLI flags, the Python
// keywords, the range checks and the README's table are made.
#include "nanovllm/engine/engine_options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

TEST(EngineOptions, NamesAndFlagsAreUnique) {
  std::set<std::string> names, flags;
  for (const EngineOption& o : engine_options()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    for (const std::string& a : o.python_aliases) EXPECT_TRUE(names.insert(a).second) << a;
    for (const std::string& f : o.cli_flags.empty() ? std::vector<std::string>{o.flag()} : o.cli_flags)
      EXPECT_TRUE(flags.insert(f).second) << f;
    EXPECT_FALSE(o.help.empty()) << o.name;
    EXPECT_FALSE(o.group.empty()) << o.name;
  }
  EXPECT_GE(engine_options().size(), 35u);
}

TEST(EngineOptions, DefaultsAreInRangeAndRoundTrip) {
  for (const EngineOption& o : engine_options()) {
    const OptionValue def = o.default_value();
    EXPECT_NO_THROW(o.check(def)) << o.name;
    EngineConfig c;
    o.set(c, def);
    EXPECT_EQ(o.get(c), def) << o.name;
  }
  EXPECT_NO_THROW(check_engine_option_ranges(EngineConfig{}));
}

TEST(EngineOptions, SetWritesTheFieldOfItsSubConfig) {
  EngineConfig c;
  find_engine_option("max_num_seqs")->set(c, int64_t{7});
  find_engine_option("sparse_prefill_threshold")->set(c, 0.5);
  find_engine_option("enable_prefix_caching")->set(c, false);
  find_engine_option("sparse_policy")->set(c, std::string("quest"));
  find_engine_option("kvcache_block_size")->set(c, int64_t{32});  // nano-vLLM's name for block_size
  find_engine_option("num_kv_blocks")->set(c, int64_t{-1});       // nano-vLLM: -1 = from the memory budget
  EXPECT_EQ(c.scheduler.max_num_seqs, 7);
  EXPECT_EQ(c.sparse_prefill.threshold, 0.5);
  EXPECT_FALSE(c.cache.enable_prefix_caching);
  EXPECT_EQ(c.sparse.policy, "quest");
  EXPECT_EQ(c.cache.block_size, 32);
  EXPECT_EQ(c.cache.num_kv_blocks, 0);
  EXPECT_EQ(find_engine_option("no_such_option"), nullptr);
}

TEST(EngineOptions, ChecksNameTheOptionAndItsRange) {
  auto message = [](const char* name, const OptionValue& v) {
    try {
      find_engine_option(name)->check(v);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("num_kv_buffers", int64_t{9}).find("num_kv_buffers must be in [1, 8], got 9"), std::string::npos);
  EXPECT_NE(message("max_num_seqs", int64_t{0}).find("max_num_seqs must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(message("gpu_memory_utilization", 0.0).find("gpu_memory_utilization must be in (0, 1], got 0"),
            std::string::npos);
  EXPECT_NE(message("sparse_policy", std::string("qwest")).find("unknown value 'qwest' (choose full | quest"),
            std::string::npos);
  EXPECT_NE(message("sparse_prefill_policy", std::string("sparse")).find("choose dense | xattention"),
            std::string::npos);
  EXPECT_EQ(message("sparse_prefill_policy", std::string("avgpool")), "no error");
  EngineConfig c;
  c.offload.num_kv_buffers = 0;
  EXPECT_THROW(c.validate(), Error);  // EngineConfig::validate runs the table's checks
}

// The README's option table is the one the table makes (regenerate it with `nanovllm options --markdown`).
TEST(EngineOptions, ReadmeTableIsTheGeneratedOne) {
  std::ifstream f(std::string(NANOVLLM_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string readme = ss.str();
  const std::string begin = "<!-- engine-options:begin -->\n", end = "<!-- engine-options:end -->";
  const size_t b = readme.find(begin), e = readme.find(end);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e) << "README.md lacks the markers";
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), engine_options_markdown())
      << "README.md's engine option table is stale: replace it with `nanovllm options --markdown`";
}

}  // namespace
}  // namespace nanovllm
