#include "errors.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "nanovllm/core/env.h"
#include "nanovllm/core/error.h"

namespace nanovllm::cli {
namespace {

// The subcommand the parse reached (the main app when none).
CLI::App* deepest_command(CLI::App& app) {
  CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  return cmd;
}

// "nanovllm bench throughput"
std::string command_path(const CLI::App& cmd) {
  std::string path;
  for (const CLI::App* a = &cmd; a != nullptr; a = a->get_parent())
    path = (a->get_parent() == nullptr ? std::string("nanovllm") : a->get_name()) + (path.empty() ? "" : " " + path);
  return path;
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* s : cmd.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// What a value of `opt` must look like, from its CLI11 type name ("INT", "FLOAT", "UINT", ...).
std::string expected_value(const CLI::Option* opt) {
  if (opt == nullptr) return "a valid value";
  const std::string t = opt->get_type_name();
  if (t.rfind("INT", 0) == 0) return "an integer";
  if (t.rfind("UINT", 0) == 0) return "a non-negative integer";
  if (t.rfind("FLOAT", 0) == 0) return "a number";
  if (t.empty()) return "no value (it is a flag)";
  return "a valid value";
}

struct Usage {
  std::string message;
  std::string suggestion;  // "--max-tokens", "generate", or empty
};

Usage describe(const CLI::ParseError& e, const CLI::App& cmd) {
  // CLI11 names some errors after the command (a subcommand's ExtrasError): tell them apart by exit code.
  const auto code = static_cast<CLI::ExitCodes>(e.get_exit_code());
  const std::string what = e.what();
  const std::vector<std::string> rest = cmd.remaining();
  if (code == CLI::ExitCodes::ExtrasError || (code == CLI::ExitCodes::RequiredError && !rest.empty())) {
    // Arguments the command did not take: a mistyped option, or (for a command of subcommands) an unknown
    // subcommand, or a stray word.
    const std::string word = rest.empty() ? std::string() : rest.front();
    if (word.size() > 1 && word[0] == '-') {
      const std::string flag = word.substr(0, word.find('='));
      return {"unknown option " + flag, closest_name(flag, option_names(cmd))};
    }
    const std::vector<std::string> subs = subcommand_names(cmd);
    if (!subs.empty()) return {"unknown command '" + word + "' (commands: " + join(subs) + ")", closest_name(word, subs)};
    return {"unexpected argument '" + word + "'", ""};
  }
  if (code == CLI::ExitCodes::RequiredError && what == "A subcommand is required")
    return {"a command is required: " + join(subcommand_names(cmd)), ""};
  if (code == CLI::ExitCodes::ConversionError) {
    // "Could not convert: --max-tokens = abc"
    const std::string prefix = "Could not convert: ";
    const size_t eq = what.find(" = ");
    if (what.rfind(prefix, 0) == 0 && eq != std::string::npos) {
      const std::string flag = what.substr(prefix.size(), eq - prefix.size());
      return {flag + " expects " + expected_value(cmd.get_option_no_throw(flag)) + ", got '" + what.substr(eq + 3) + "'",
              ""};
    }
  }
  if (code == CLI::ExitCodes::ValidationError) {
    // CLI11 writes "--flag: <the validator's message>"; ours read "must be ...".
    const size_t colon = what.find(": must ");
    if (colon != std::string::npos) return {what.substr(0, colon) + what.substr(colon + 1), ""};
  }
  if (code == CLI::ExitCodes::ArgumentMismatch) {
    const size_t colon = what.find(": ");
    const std::string flag = colon == std::string::npos ? std::string() : what.substr(0, colon);
    if (what.find(" missing") != std::string::npos) return {flag + " needs a value", ""};
    if (what.find("At Most") != std::string::npos) return {flag + " was given more than once", ""};
  }
  return {what, ""};
}

}  // namespace

void add_debug_flag(CLI::App& app) {
  app.add_flag("--debug")->description("show where in the source an error was raised (also NANOVLLM_LOG_LEVEL=debug)");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_debug_flag(*sub);
}

bool debug_requested(const CLI::App& cmd) {
  if (environment().log_level == LogLevel::kDebug) return true;
  // Anywhere on the command line: from the main app down through the subcommands parsed.
  const CLI::App* a = &cmd;
  while (a->get_parent() != nullptr) a = a->get_parent();
  for (;;) {
    const CLI::Option* o = a->get_option_no_throw("--debug");
    if (o != nullptr && o->count() > 0) return true;
    const std::vector<CLI::App*> parsed = a->get_subcommands();
    if (parsed.empty()) return false;
    a = parsed.front();
  }
}

void print_error(const std::exception& e, bool debug) {
  const auto* err = dynamic_cast<const Error*>(&e);
  if (err != nullptr && !(debug && !err->location().empty())) {
    std::fprintf(stderr, "error: %s\n", err->message().c_str());
  } else {
    std::fprintf(stderr, "error: %s\n", e.what());  // with the location (nanovllm::Error), or not ours
  }
  std::fflush(stderr);
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // help, --version
  // The command the error belongs to: the innermost one left with arguments it did not take, else the
  // innermost one the parse reached.
  const CLI::App* cmd = deepest_command(app);
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    if (!a->remaining().empty()) {
      cmd = a;
      break;
    }
  }
  const Usage u = describe(e, *cmd);
  std::fprintf(stderr, "error: %s\n", u.message.c_str());
  if (!u.suggestion.empty()) std::fprintf(stderr, "did you mean %s?\n", u.suggestion.c_str());
  std::fprintf(stderr, "run '%s --help' for usage\n", command_path(*cmd).c_str());
  std::fflush(stderr);
  return 1;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: three rows of the DP table.
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  // The only name that starts with the word (an abbreviation like --temp), else the nearest name within
  // half the word's length in edits (leading dashes not counted).
  const std::string_view bare = word.substr(std::min(word.find_first_not_of('-'), word.size()));
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates)
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) prefixed.push_back(c);
  if (bare.size() >= 3 && prefixed.size() == 1) return prefixed.front();
  const size_t limit = std::max<size_t>(2, bare.size() / 2);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace nanovllm::cli
