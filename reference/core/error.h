// error.h: kvlab's exceptions and argument checks.
//
// Bad input (unsupported shape, format, parameter) throws an error that says what was
// given and what is allowed; nothing is silently clamped or truncated. Two kinds:
//   InvalidArgument: the input is wrong (null pointer, out-of-range index, malformed value)
//   Unsupported:     the input is valid but this implementation does not handle it
//                    (e.g. a kernel version without FP4 support); sweeps record these as
//                    "skipped" with the message as the reason.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kvlab {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class Unsupported : public Error {
 public:
  using Error::Error;
};

}  // namespace kvlab

// KVLAB_REQUIRE(cond, "head_dim " << d << " is not a multiple of " << x);
#define KVLAB_REQUIRE(cond, msg)                       \
  do {                                                 \
    if (!(cond)) {                                     \
      std::ostringstream kvlab_os_;                    \
      kvlab_os_ << msg;                                \
      throw ::kvlab::InvalidArgument(kvlab_os_.str()); \
    }                                                  \
  } while (0)

#define KVLAB_UNSUPPORTED_IF(cond, msg)            \
  do {                                             \
    if (cond) {                                    \
      std::ostringstream kvlab_os_;                \
      kvlab_os_ << msg;                            \
      throw ::kvlab::Unsupported(kvlab_os_.str()); \
    }                                              \
  } while (0)
