// synth.cpp: seeded synthetic KV generators (see synth.h).
#include "reference/synth/synth.h"

#include <algorithm>
#include <cmath>

#include "reference/core/error.h"
#include "reference/core/mix64.h"

namespace kvlab::ref {
namespace {
// One SplitMix64 step: the output of state x, then x advanced.
uint64_t splitmix64(uint64_t& x) {
  const uint64_t z = mix64(x);
  x += kGolden64;
  return z;
}
uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}
constexpr double kTwoPi = 6.283185307179586476925286766559;
}  // namespace

SynthRng::SynthRng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t SynthRng::next_u64() {  // xoshiro256**
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double SynthRng::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double SynthRng::gaussian() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(kTwoPi * u2);
  has_spare_ = true;
  return r * std::cos(kTwoPi * u2);
}

void validate(const SynthSpec& s) {
  KVLAB_REQUIRE(s.tokens >= 0, "synth: tokens must be >= 0, got " << s.tokens);
  KVLAB_REQUIRE(s.heads >= 1, "synth: heads must be >= 1, got " << s.heads);
  KVLAB_REQUIRE(s.head_dim >= 1, "synth: head_dim must be >= 1, got " << s.head_dim);
  KVLAB_REQUIRE(std::isfinite(s.std) && s.std > 0,
                "synth: std must be finite and > 0, got " << s.std);
  KVLAB_REQUIRE(s.t_dof == 0 || s.t_dof >= 3,
                "synth: t_dof must be 0 (Gaussian) or >= 3 (finite variance), got " << s.t_dof);
  KVLAB_REQUIRE(s.outlier_channels >= 0 && s.outlier_channels <= s.head_dim,
                "synth: outlier_channels must be in [0, head_dim=" << s.head_dim << "], got "
                                                                   << s.outlier_channels);
  KVLAB_REQUIRE(std::isfinite(s.outlier_min) && std::isfinite(s.outlier_max) &&
                    s.outlier_min >= 1.0 && s.outlier_max >= s.outlier_min,
                "synth: outlier gains need 1 <= outlier_min <= outlier_max, got ["
                    << s.outlier_min << ", " << s.outlier_max << "]");
  KVLAB_REQUIRE(std::isfinite(s.channel_bias_std) && s.channel_bias_std >= 0,
                "synth: channel_bias_std must be finite and >= 0, got " << s.channel_bias_std);
  KVLAB_REQUIRE(s.rho >= 0 && s.rho < 1, "synth: rho must be in [0, 1), got " << s.rho);
}

std::vector<std::vector<int32_t>> synth_outlier_channels(const SynthSpec& s) {
  validate(s);
  SynthRng rng(s.seed ^ 0x6368616E6E656C73ull);  // "channels": independent of the token stream
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(s.heads));
  std::vector<int32_t> perm(static_cast<size_t>(s.head_dim));
  for (int32_t h = 0; h < s.heads; ++h) {
    for (int32_t d = 0; d < s.head_dim; ++d) perm[d] = d;
    // Partial Fisher-Yates: the first outlier_channels entries are a uniform sample.
    for (int32_t i = 0; i < s.outlier_channels; ++i) {
      const int32_t j =
          i + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(s.head_dim - i));
      std::swap(perm[i], perm[j]);
    }
    out[h].assign(perm.begin(), perm.begin() + s.outlier_channels);
    std::sort(out[h].begin(), out[h].end());
  }
  return out;
}

std::vector<float> synth_kv(const SynthSpec& s) {
  validate(s);
  const int64_t C = static_cast<int64_t>(s.heads) * s.head_dim;  // channels
  // Channel gains and biases (channel stream: outliers first, then gains, then biases).
  std::vector<double> gain(static_cast<size_t>(C), s.std), bias(static_cast<size_t>(C), 0.0);
  const auto outliers = synth_outlier_channels(s);
  SynthRng crng(s.seed ^ 0x6761696E73626961ull);  // "gainsbia"
  for (int32_t h = 0; h < s.heads; ++h)
    for (int32_t d : outliers[h]) {
      const double u = crng.uniform();
      gain[static_cast<size_t>(h) * s.head_dim + d] =
          s.std * std::exp(std::log(s.outlier_min) +
                           u * (std::log(s.outlier_max) - std::log(s.outlier_min)));
    }
  if (s.channel_bias_std > 0)
    for (auto& b : bias) b = s.channel_bias_std * crng.gaussian();

  SynthRng rng(s.seed);
  // Innovation with unit variance: Gaussian, or Student-t(nu) * sqrt((nu - 2) / nu).
  const double t_norm = s.t_dof > 0 ? std::sqrt((s.t_dof - 2.0) / s.t_dof) : 1.0;
  auto innovation = [&]() {
    const double z = rng.gaussian();
    if (s.t_dof == 0) return z;
    double chi2 = 0;
    for (int i = 0; i < s.t_dof; ++i) {
      const double g = rng.gaussian();
      chi2 += g * g;
    }
    return z / std::sqrt(chi2 / s.t_dof) * t_norm;
  };
  const double a = s.rho, b = std::sqrt(1.0 - s.rho * s.rho);
  std::vector<double> z(static_cast<size_t>(C), 0.0);
  std::vector<float> out(static_cast<size_t>(s.tokens * C));
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int64_t c = 0; c < C; ++c) {
      const double e = innovation();
      z[c] = t == 0 ? e : a * z[c] + b * e;
      out[t * C + c] = static_cast<float>(bias[c] + gain[c] * z[c]);
    }
  return out;
}

const std::vector<std::string>& synth_preset_names() {
  static const std::vector<std::string> n{"gaussian", "heavy_tailed", "ar1", "kcache"};
  return n;
}

SynthSpec synth_preset(const std::string& name, int64_t tokens, int32_t heads, int32_t head_dim,
                       uint64_t seed) {
  SynthSpec s;
  s.tokens = tokens;
  s.heads = heads;
  s.head_dim = head_dim;
  s.seed = seed;
  if (name == "gaussian") {
  } else if (name == "heavy_tailed" || name == "kcache") {
    s.t_dof = 4;
    s.outlier_channels = std::min<int32_t>(4, head_dim);
    s.channel_bias_std = 0.5;
    if (name == "kcache") s.rho = 0.9;
  } else if (name == "ar1") {
    s.rho = 0.9;
  } else {
    std::string allowed;
    for (const auto& n : synth_preset_names()) allowed += (allowed.empty() ? "" : ", ") + n;
    throw InvalidArgument("unknown synthetic KV preset '" + name + "' (allowed: " + allowed + ")");
  }
  validate(s);
  return s;
}

}  // namespace kvlab::ref
