// How the CLI reports what went wrong. Every user error prints "error: <message>" on stderr and exits 1:
// the source file:line a nanovllm::Error carries is shown only in debug mode (--debug, or
// NANOVLLM_LOG_LEVEL=debug), and CLI11's parse errors (unknown or mistyped options, bad values, missing
// ones) become the same kind of message, with a "did you mean" for a mistyped option or subcommand.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace nanovllm::cli {

// Adds --debug to `app` and to every subcommand under it (so it may follow the subcommand's name).
void add_debug_flag(CLI::App& app);
// Whether --debug was given anywhere on the command line `cmd` belongs to, or NANOVLLM_LOG_LEVEL is debug.
bool debug_requested(const CLI::App& cmd);

// "error: message" (with the location of a nanovllm::Error when `debug`), on stderr.
void print_error(const std::exception& e, bool debug);

// Prints a parse error of `app` (help and --version print their text) and returns the exit status:
// 0 for help / version, 1 otherwise.
int report_parse_error(CLI::App& app, const CLI::ParseError& e);

// Edit distance (insertions, deletions, substitutions, adjacent transpositions), for suggestions.
size_t edit_distance(std::string_view a, std::string_view b);
// The candidate `word` was most likely meant to be, or "" when none is close.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace nanovllm::cli
