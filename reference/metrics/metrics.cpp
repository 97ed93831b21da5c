// metrics.cpp: the one implementation of the error metrics declared in metrics.h.
//
// Everything is accumulated in double over the finite pairs; non-finite values are counted,
// classified (matching or mismatched) and kept out of the norms, so one NaN neither hides
// nor swamps the error of the rest of the tensor.
#include "reference/metrics/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "reference/core/error.h"
#include "reference/formats/formats.h"

namespace kvlab {
namespace {

// Sign-magnitude code -> a monotone integer line (+0 and -0 both map to 0).
int64_t ordered(uint32_t code, int sign_bit) {
  const uint32_t sign_mask = 1u << sign_bit;
  const int64_t mag = static_cast<int64_t>(code & (sign_mask - 1u));
  return (code & sign_mask) ? -mag : mag;
}

int64_t ordered_in_grid(float x, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      uint32_t u;
      std::memcpy(&u, &x, sizeof(u));
      return ordered(u, 31);
    }
    // Non-saturating RNE: a value beyond the grid's max finite becomes its Inf, one step
    // beyond max finite on the integer line.
    case DType::kBF16:
      return ordered(float_to_bf16_bits(x, Saturation::kNonSaturating), 15);
    case DType::kF16:
      return ordered(float_to_fp16_bits(x, Saturation::kNonSaturating), 15);
  }
  throw InvalidArgument("ulp_distance: unknown dtype value " +
                        std::to_string(static_cast<int>(dtype)) + " (allowed: f32, bf16, f16)");
}

bool same_nonfinite(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::isinf(a) && std::isinf(b) && std::signbit(a) == std::signbit(b);
}

}  // namespace

int64_t ulp_distance(float a, float b, DType dtype) {
  KVLAB_REQUIRE(std::isfinite(a) && std::isfinite(b),
                "ulp_distance needs finite values, got " << a << " and " << b);
  const int64_t d = ordered_in_grid(a, dtype) - ordered_in_grid(b, dtype);
  return d < 0 ? -d : d;
}

ErrorStats compare(const float* out, const float* ref, size_t n, DType ulp_dtype) {
  KVLAB_REQUIRE(n == 0 || (out != nullptr && ref != nullptr),
                "compare: null pointer (out=" << static_cast<const void*>(out) << ", ref="
                                              << static_cast<const void*>(ref) << ") for n=" << n);
  // Validates the dtype once, before the loop.
  (void)ordered_in_grid(0.0f, ulp_dtype);

  ErrorStats s;
  s.count = static_cast<int64_t>(n);
  double sum_d2 = 0, sum_r2 = 0, sum_o2 = 0, sum_or = 0;
  double worst = -1;
  for (size_t i = 0; i < n; ++i) {
    const float o = out[i], r = ref[i];
    const bool fo = std::isfinite(o), fr = std::isfinite(r);
    if (std::isnan(o)) ++s.nan_out;
    if (std::isinf(o)) ++s.inf_out;
    if (std::isnan(r)) ++s.nan_ref;
    if (std::isinf(r)) ++s.inf_ref;
    if (!fo || !fr) {
      if (fo != fr || !same_nonfinite(o, r)) {
        if (s.mismatched_nonfinite++ == 0) {
          // A non-finite mismatch outranks every finite difference.
          s.worst_index = static_cast<int64_t>(i);
          worst = INFINITY;
        }
      }
      continue;
    }
    const double od = o, rd = r, d = std::fabs(od - rd);
    if (d > s.max_abs) s.max_abs = d;
    if (rd != 0 && d / std::fabs(rd) > s.max_rel) s.max_rel = d / std::fabs(rd);
    if (d > worst) {
      worst = d;
      s.worst_index = static_cast<int64_t>(i);
    }
    sum_d2 += d * d;
    sum_r2 += rd * rd;
    sum_o2 += od * od;
    sum_or += od * rd;
    const int64_t u = ulp_distance(o, r, ulp_dtype);
    if (u > s.max_ulp) s.max_ulp = u;
  }
  if (sum_d2 == 0) {
    s.rel_l2 = s.nmse = 0;
  } else if (sum_r2 == 0) {
    s.rel_l2 = s.nmse = INFINITY;
  } else {
    s.nmse = sum_d2 / sum_r2;
    s.rel_l2 = std::sqrt(s.nmse);
  }
  if (sum_o2 == 0 && sum_r2 == 0) {
    s.cosine = 1;
  } else if (sum_o2 == 0 || sum_r2 == 0) {
    s.cosine = 0;
  } else {
    s.cosine = sum_or / (std::sqrt(sum_o2) * std::sqrt(sum_r2));
  }
  return s;
}

ErrorStats compare(const std::vector<float>& out, const std::vector<float>& ref, DType ulp_dtype) {
  KVLAB_REQUIRE(out.size() == ref.size(), "compare: out has "
                                              << out.size() << " elements but ref has "
                                              << ref.size() << " (they must match)");
  return compare(out.data(), ref.data(), out.size(), ulp_dtype);
}

std::string to_string(const ErrorStats& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "n=%lld max_abs=%.3e max_rel=%.3e rel_l2=%.3e nmse=%.3e cos=%.9f max_ulp=%lld "
                "nan(out/ref)=%lld/%lld inf(out/ref)=%lld/%lld nonfinite_mismatch=%lld "
                "violations=%lld worst_index=%lld",
                static_cast<long long>(s.count), s.max_abs, s.max_rel, s.rel_l2, s.nmse, s.cosine,
                static_cast<long long>(s.max_ulp), static_cast<long long>(s.nan_out),
                static_cast<long long>(s.nan_ref), static_cast<long long>(s.inf_out),
                static_cast<long long>(s.inf_ref), static_cast<long long>(s.mismatched_nonfinite),
                static_cast<long long>(s.violations), static_cast<long long>(s.worst_index));
  return buf;
}

}  // namespace kvlab
