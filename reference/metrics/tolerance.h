// tolerance.h: THE tolerance table. No tolerance literal lives in a test body.
//
// A check passes when every element satisfies |out - ref| <= atol + rtol * |ref|, the
// normalized MSE is at most nmse_max, and no non-finite value appears where the reference
// is finite (unless allow_nonfinite). Entries are keyed by (operation, storage format,
// output dtype) and, where depth changes the error, by the decoder's layer count; each entry
// documents why its numbers are what they are and names the measurement behind them (a data
// file under data/tolerance/ and the command that regenerates it; tolerance.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"
#include "reference/metrics/metrics.h"

namespace kvlab {

enum class Op {
  kDecodeAttention,        // GPU decode vs reference over the *same* (dequantized) cache
  kDecodeAttentionVsBf16,  // quantized-cache decode vs reference over the original data (loose,
                           // recorded)
  kDecodeLse,              // the log-sum-exp output
  kPrefillAttention,
  kOnlineSoftmaxMerge,   // split-KV merge vs two-pass softmax
  kQuantRoundTrip,       // quantize -> dequantize vs input (per-token relative L2)
  kQuantBytes,           // quantizer bytes vs reference: exact (0 differing bytes)
  kAppend,               // append / reshape_and_cache vs reference: exact
  kCompressor,           // DSV4 CSA/HCA compression, GPU vs reference
  kDecodeStepLogits,     // full decode step logits, GPU vs CPU reference
  kReferenceCrossCheck,  // two float64-accumulating references of the same math (decode vs
                         // prefill, decode vs an independent dense computation), one
                         // rounded to out_dtype, the other kept in f32
};
constexpr int kNumOps = 11;
const std::vector<Op>& all_ops();

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double nmse_max = 0;
  bool allow_nonfinite = false;
  const char* why = "";
  // The measurement behind the numbers. data: a file under data/tolerance/ holding it ("" for
  // the rows whose measurement is a GPU run still to be stored: then command says which);
  // command: how to regenerate it. Every row names a command (tests/cpu/test_tolerance.cpp);
  // every row with a CSV data file is checked against it (tests/cpu/test_tolerance_data.cpp).
  const char* data = "";
  const char* command = "";
  // Small units: the NMSE of a unit of few elements (a ratio of few squares) spreads wider
  // than that of a large one, so a row may hold units of fewer than nmse_small_below
  // elements to nmse_max_small instead (0, 0: one bound for every unit). nmse_bound() picks.
  double nmse_max_small = 0;
  int64_t nmse_small_below = 0;
};

// The NMSE bound a unit of `elements` compared elements is held to.
double nmse_bound(const Tolerance& tol, int64_t elements);

// The entry for (op, format, out_dtype[, layers]). `layers` is the decoder depth; the
// decode-step logits are keyed by it (their error grows with depth) and need it (>= 1: an
// InvalidArgument otherwise); other operations ignore it. Throws Unsupported naming the
// combination (and why it has no entry) when the table has none; every combination either
// has an entry or throws (tests/cpu/test_tolerance.cpp walks them all).
Tolerance tolerance(Op op, KvFormat format, DType out_dtype, int32_t layers = 0);
std::string to_string(Op op);  // e.g. "decode_attention"

// One row of the table as stored: format / dtype -1 = any; layers [min_layers, max_layers]
// (0, 0 = not keyed by depth). For tests that walk every row (data, planted errors).
struct ToleranceRow {
  Op op;
  int format;
  int dtype;
  int32_t min_layers, max_layers;
  Tolerance tol;
};
const std::vector<ToleranceRow>& tolerance_rows();

// Computes compare(out, ref, n, ulp_dtype) into *s (s may be nullptr), then fills
// s->violations / s->worst_index using the tolerance and returns whether the whole check
// passes:
//   - every finite pair satisfies |out - ref| <= atol + rtol * |ref|;
//   - nmse <= nmse_bound(tol, n) (skipped when ||ref|| = 0: the elementwise bound then
//     decides);
//   - no non-finite mismatch (see metrics.h), unless allow_nonfinite.
// Non-finite mismatches count as violations (unless allowed) and rank worst.
bool check(const float* out, const float* ref, size_t n, const Tolerance& tol, ErrorStats* s,
           DType ulp_dtype = DType::kF32);
// As above; throws InvalidArgument when the sizes differ.
bool check(const std::vector<float>& out, const std::vector<float>& ref, const Tolerance& tol,
           ErrorStats* s, DType ulp_dtype = DType::kF32);

// Why a checked ErrorStats fails `tol` ("" when it passes): for failure messages and the
// "reason" column of sweep records.
std::string explain_failure(const ErrorStats& s, const Tolerance& tol);

}  // namespace kvlab
