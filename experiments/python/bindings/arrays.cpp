// arrays.cpp: see arrays.h.
#include "experiments/python/bindings/arrays.h"

#include <sstream>

namespace kvlab::py {

namespace {
using Code = nb::dlpack::dtype_code;

bool is(const nb::dlpack::dtype& t, Code c, int bits) {
  return t.code == static_cast<uint8_t>(c) && t.bits == bits && t.lanes == 1;
}
bool int_bits(const nb::dlpack::dtype& t, int bits) {
  return is(t, Code::Int, bits) || is(t, Code::UInt, bits);
}
}  // namespace

std::string dtype_name(const nb::dlpack::dtype& t) {
  std::string base;
  switch (static_cast<Code>(t.code)) {
    case Code::Int: base = "int"; break;
    case Code::UInt: base = "uint"; break;
    case Code::Float: base = "float"; break;
    case Code::Bfloat: base = "bfloat"; break;
    case Code::Bool: return "bool";
    case Code::Complex: base = "complex"; break;
    case Code::Float8_E4M3FN: return "float8_e4m3fn";
    case Code::Float8_E5M2: return "float8_e5m2";
    case Code::Float8_E8M0FNU: return "float8_e8m0fnu";
    case Code::Float4_E2M1FN: return "float4_e2m1fn";
    default: base = "dlpack_code" + std::to_string(t.code) + "_"; break;
  }
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

std::string shape_str(const Array& a) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << "]";
  return os.str();
}

std::string elem_name(Elem e) {
  switch (e) {
    case Elem::kF32: return "float32";
    case Elem::kF64: return "float64";
    case Elem::kI32: return "int32";
    case Elem::kI64: return "int64";
    case Elem::kU8: return "uint8 (or int8)";
    case Elem::kBF16: return "bfloat16 (or uint16/int16 holding BF16 bits)";
    case Elem::kF16: return "float16 (or uint16/int16 holding FP16 bits)";
    case Elem::kFP8E4M3: return "float8_e4m3fn (or uint8/int8 holding E4M3 codes)";
    case Elem::kFP8E5M2: return "float8_e5m2 (or uint8/int8 holding E5M2 codes)";
    case Elem::kUE8M0: return "float8_e8m0fnu (or uint8/int8 holding UE8M0 codes)";
    case Elem::kFP4Packed: return "uint8 (or int8) holding two E2M1 codes per byte";
  }
  return "?";
}

bool dtype_matches(const nb::dlpack::dtype& t, Elem e) {
  switch (e) {
    case Elem::kF32: return is(t, Code::Float, 32);
    case Elem::kF64: return is(t, Code::Float, 64);
    case Elem::kI32: return is(t, Code::Int, 32);
    case Elem::kI64: return is(t, Code::Int, 64);
    case Elem::kU8: return int_bits(t, 8);
    case Elem::kBF16: return is(t, Code::Bfloat, 16) || int_bits(t, 16);
    case Elem::kF16: return is(t, Code::Float, 16) || int_bits(t, 16);
    case Elem::kFP8E4M3: return is(t, Code::Float8_E4M3FN, 8) || int_bits(t, 8);
    case Elem::kFP8E5M2: return is(t, Code::Float8_E5M2, 8) || int_bits(t, 8);
    case Elem::kUE8M0: return is(t, Code::Float8_E8M0FNU, 8) || int_bits(t, 8);
    case Elem::kFP4Packed:
      return int_bits(t, 8) || (t.code == static_cast<uint8_t>(Code::Float4_E2M1FN) &&
                                t.bits * t.lanes == 8);
  }
  return false;
}

int64_t dim(const Array& a, size_t i) { return static_cast<int64_t>(a.shape(i)); }

void Checker::placement(const Array& a, const char* name) {
  const int dt = a.device_type();
  if (where_ == Where::kHost) {
    KVLAB_REQUIRE(dt == nb::device::cpu::value || dt == nb::device::cuda_host::value,
                  name << ": kvlab.ref and kvlab.formats take host arrays (numpy or CPU tensors); "
                       << "this one lives on a device (DLPack device type " << dt << ")");
    return;
  }
  KVLAB_REQUIRE(dt == nb::device::cuda::value || dt == nb::device::cuda_managed::value,
                name << ": kvlab.ops takes CUDA arrays (e.g. torch tensors on 'cuda'); this one "
                     << "is not on a CUDA device (DLPack device type " << dt << ")");
  if (device_id_ < 0) {
    device_id_ = a.device_id();
    first_name_ = name;
  } else {
    KVLAB_REQUIRE(a.device_id() == device_id_, name << " is on cuda:" << a.device_id()
                                                    << " but " << first_name_ << " is on cuda:"
                                                    << device_id_ << ": one device per call");
  }
}

void* Checker::check_rank(const Array& a, const char* name, Elem e, size_t ndim) {
  check_head(a, name, e, ndim);
  check_strides(a, name);
  return a.data();
}

void Checker::check_head(const Array& a, const char* name, Elem e, size_t ndim) {
  placement(a, name);
  KVLAB_REQUIRE(dtype_matches(a.dtype(), e), name << ": dtype " << dtype_name(a.dtype())
                                                  << ", expected " << elem_name(e));
  KVLAB_REQUIRE(a.ndim() == ndim, name << ": " << a.ndim() << " dimensions " << shape_str(a)
                                       << ", expected " << ndim);
}

void Checker::check_strides(const Array& a, const char* name) {
  if (a.size() == 0) return;  // no element to address: strides do not matter
  // Dense row-major: kvlab addresses every buffer by its documented layout.
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect)
      throw InvalidArgument(std::string(name) + ": not a dense row-major (C-contiguous) array " +
                            "of shape " + shape_str(a) +
                            "; kvlab reads and writes it in place, pass .contiguous() "
                            "(a K or V view of a combined [num_blocks, 2, ...] cache is not "
                            "contiguous: keep K and V in pools of their own)");
    expect *= static_cast<int64_t>(a.shape(i));
  }
}

void* Checker::check(const Array& a, const char* name, Elem e, const std::vector<int64_t>& shape) {
  check_head(a, name, e, shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0 && dim(a, i) != shape[i]) {
      std::ostringstream want;
      want << "[";
      for (size_t j = 0; j < shape.size(); ++j)
        want << (j ? ", " : "") << (shape[j] >= 0 ? std::to_string(shape[j]) : std::string("*"));
      want << "]";
      throw InvalidArgument(std::string(name) + ": shape " + shape_str(a) + ", expected " +
                            want.str());
    }
  }
  check_strides(a, name);
  return a.data();
}

DType parse_q_dtype(const Array& q, const std::string& q_dtype) {
  const auto t = q.dtype();
  if (!q_dtype.empty()) {
    const DType d = parse_dtype(q_dtype);
    KVLAB_REQUIRE(d == DType::kBF16 || d == DType::kF16,
                  "q_dtype " << q_dtype << ": decode queries are bf16 or f16");
    if (d == DType::kBF16)
      KVLAB_REQUIRE(dtype_matches(t, Elem::kBF16) && !is(t, Code::Float, 16),
                    "q: dtype " << dtype_name(t) << " does not hold bf16 values");
    else
      KVLAB_REQUIRE(dtype_matches(t, Elem::kF16) && !is(t, Code::Bfloat, 16),
                    "q: dtype " << dtype_name(t) << " does not hold f16 values");
    return d;
  }
  if (is(t, Code::Bfloat, 16)) return DType::kBF16;
  if (is(t, Code::Float, 16)) return DType::kF16;
  KVLAB_REQUIRE(!int_bits(t, 16), "q: dtype " << dtype_name(t)
                                              << " holds raw 16-bit codes: say which with "
                                                 "q_dtype='bf16' or q_dtype='f16'");
  throw InvalidArgument("q: dtype " + dtype_name(t) +
                        ", expected bfloat16 or float16 (or 16-bit codes with q_dtype)");
}

}  // namespace kvlab::py
