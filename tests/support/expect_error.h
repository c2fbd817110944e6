// expect_error(fn, {"part", ...}): fn must throw nanovllm::Error whose message contains every part.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "nanovllm/core/error.h"

namespace nanovllm::testing {

template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace nanovllm::testing
