// test_formats_oracle.h: an independent model of kvlab's number formats, for tests.
//
// Written differently from formats.h on purpose: values come from the textbook formula
// (-1)^s * 2^(E - bias) * (1 + M / 2^m) (subnormal: 2^(1 - bias) * M / 2^m) evaluated
// with ldexp in double, and encoding searches the sorted table of representable values:
// the result is the nearer neighbour, compared against their exact midpoint, ties going to
// the even code. Overflow is "rounds to the value one step above max finite" (the
// sentinel). Only the documented choices of formats.h are taken as given: the canonical
// NaN codes, and E2M1 saturating always with NaN -> +6.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/formats/formats.h"

namespace kvlab::test {

enum class Specials { kIeee, kFn, kNone };  // Inf+NaN at max exponent / only all-ones NaN / none

struct FormatModel {
  const char* name;
  int bits, exp_bits, man_bits, bias;
  Specials specials;
  uint32_t max_code;  // largest finite magnitude code
  uint32_t nan_code;  // canonical NaN produced by encode (E2M1: the code NaN maps to)
  uint32_t inf_code;  // positive Inf (0 when none)

  uint32_t sign_bit() const { return 1u << (bits - 1); }

  // Decoded value of a code (NaN and ±Inf included).
  double decode(uint32_t code) const {
    const bool neg = (code & sign_bit()) != 0;
    const uint32_t mag = code & (sign_bit() - 1);
    const uint32_t E = mag >> man_bits, M = mag & ((1u << man_bits) - 1);
    const uint32_t emax_field = (1u << exp_bits) - 1;
    double v;
    if (specials == Specials::kIeee && E == emax_field) {
      v = M == 0 ? std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::quiet_NaN();
    } else if (specials == Specials::kFn && E == emax_field && M == (1u << man_bits) - 1) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (E == 0) {
      v = std::ldexp(static_cast<double>(M), 1 - bias - man_bits);
    } else {
      v = std::ldexp(static_cast<double>((1u << man_bits) + M),
                     static_cast<int>(E) - bias - man_bits);
    }
    return neg ? -v : v;
  }

  // Non-negative finite values by magnitude code 0..max_code, then the overflow sentinel
  // (max finite + its ulp).
  std::vector<double> table() const {
    std::vector<double> t;
    for (uint32_t c = 0; c <= max_code; ++c) t.push_back(decode(c));
    const int e_max = static_cast<int>(max_code >> man_bits) - bias;
    t.push_back(t.back() + std::ldexp(1.0, e_max - man_bits));
    return t;
  }
};

inline const FormatModel kE4M3Model{"e4m3", 8, 4, 3, 7, Specials::kFn, 0x7E, 0x7F, 0};
inline const FormatModel kE5M2Model{"e5m2", 8, 5, 2, 15, Specials::kIeee, 0x7B, 0x7F, 0x7C};
inline const FormatModel kE2M1Model{"e2m1", 4, 2, 1, 1, Specials::kNone, 0x7, 0x7, 0};
inline const FormatModel kFP16Model{"fp16", 16, 5, 10, 15, Specials::kIeee, 0x7BFF, 0x7FFF, 0x7C00};
inline const FormatModel kBF16Model{"bf16", 16, 8, 7, 127, Specials::kIeee, 0x7F7F, 0x7FFF, 0x7F80};

// Oracle encoder over a model's table.
class EncodeOracle {
 public:
  explicit EncodeOracle(const FormatModel& m) : m_(m), t_(m.table()) {
    for (size_t i = 0; i + 1 < t_.size(); ++i)
      mid_.push_back((t_[i] + t_[i + 1]) / 2);  // exact in double
  }
  const FormatModel& model() const { return m_; }
  const std::vector<double>& table() const { return t_; }

  // Magnitude code of a finite |x| >= 0 when its table interval is k (t[k] <= a < t[k+1]);
  // returns max_code + 1 for overflow.
  uint32_t round_in(double a, size_t k) const {
    if (a == t_[k]) return static_cast<uint32_t>(k);
    if (a < mid_[k]) return static_cast<uint32_t>(k);
    if (a > mid_[k]) return static_cast<uint32_t>(k + 1);
    return static_cast<uint32_t>((k & 1) ? k + 1 : k);  // tie: the even code
  }
  size_t interval(double a) const {  // t[k] <= a < t[k+1], a < sentinel
    return static_cast<size_t>(std::upper_bound(t_.begin(), t_.end(), a) - t_.begin()) - 1;
  }
  // Final code from a magnitude code (possibly overflowed) and the sign.
  uint32_t finish(uint32_t mag, bool neg, Saturation sat) const {
    if (mag > m_.max_code) {
      if (m_.specials == Specials::kNone || sat == Saturation::kSatFinite)
        mag = m_.max_code;
      else
        mag = m_.specials == Specials::kIeee ? m_.inf_code : m_.nan_code;
    }
    return neg ? (mag | m_.sign_bit()) : mag;
  }
  uint32_t encode(float x, Saturation sat) const {
    if (std::isnan(x)) return m_.nan_code;
    const bool neg = std::signbit(x);
    const double a = std::fabs(static_cast<double>(x));
    if (std::isinf(x)) return finish(m_.max_code + 1, neg, sat);
    if (a >= t_.back()) return finish(m_.max_code + 1, neg, sat);
    return finish(round_in(a, interval(a)), neg, sat);
  }

 private:
  const FormatModel& m_;
  std::vector<double> t_;
  std::vector<double> mid_;
};

// formats.h's encoder / decoder for a model (the code under test).
inline uint32_t encode_under_test(const FormatModel& m, float x, Saturation sat) {
  if (&m == &kE4M3Model) return float_to_e4m3(x, sat);
  if (&m == &kE5M2Model) return float_to_e5m2(x, sat);
  if (&m == &kE2M1Model) return float_to_e2m1(x);
  if (&m == &kFP16Model) return float_to_fp16_bits(x, sat);
  return float_to_bf16_bits(x, sat);
}
inline float decode_under_test(const FormatModel& m, uint32_t c) {
  if (&m == &kE4M3Model) return e4m3_to_float(static_cast<uint8_t>(c));
  if (&m == &kE5M2Model) return e5m2_to_float(static_cast<uint8_t>(c));
  if (&m == &kE2M1Model) return e2m1_to_float(static_cast<uint8_t>(c));
  if (&m == &kFP16Model) return fp16_bits_to_float(static_cast<uint16_t>(c));
  return bf16_bits_to_float(static_cast<uint16_t>(c));
}

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace kvlab::test
