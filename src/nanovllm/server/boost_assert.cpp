// Boost's assertion handler. The server is built with BOOST_ENABLE_ASSERT_DEBUG_HANDLER: in release builds
// (NDEBUG) Boost's assertions stay compiled out as before; in builds without NDEBUG (cpu-debug, the fuzzer)
// they come here and abort like assert() — except one that is known to be wrong. Beast 1.81's chunked
// parser asserts `n >= 5` when the last chunk "0\r\n" is resumed with fewer bytes than that, a case the code
// after it handles (it asks for more); fixed upstream in boostorg/beast PR 2861 (Boost 1.86). A client that
// sends its body one byte at a time must not abort a debug build.
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace boost {

void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line) {
  const std::string_view e(expr), f(file);
  if (e == "n >= 5" && f.ends_with("beast/http/impl/basic_parser.ipp")) return;
  std::fprintf(stderr, "%s:%ld: %s: Boost assertion `%s' failed%s%s\n", file, line, function, expr,
               msg ? ": " : "", msg ? msg : "");
  std::abort();
}

void assertion_failed(char const* expr, char const* function, char const* file, long line) {
  assertion_failed_msg(expr, nullptr, function, file, line);
}

}  // namespace boost
