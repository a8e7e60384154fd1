// What every fuzz target checks: reading bad input ends in kestrel::InvalidArgument (a clear message for
// the user) or succeeds; anything else — another exception, a crash, a sanitizer report, a hang — is a
// finding. Each target defines LLVMFuzzerTestOneInput; libFuzzer drives it (scripts/fuzz.sh), and
// corpus_replay.cpp runs the kept corpora through it as an ordinary test.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "kestrel/error.h"

namespace kestrel::fuzz {

template <class Body>
void expect_clear_errors(const char* target, Body&& body) {
  try {
    body();
  } catch (const kestrel::InvalidArgument&) {
    // the expected way to refuse bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: an unexpected exception escaped: %s\n", target, e.what());
    std::abort();
  }
}

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

}  // namespace kestrel::fuzz
