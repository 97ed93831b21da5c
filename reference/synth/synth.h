// synth.h: seeded synthetic KV generators with controllable statistics.
//
// Produces float [tokens, heads, head_dim] tensors for quantization and attention sweeps.
// Element (t, h, d) = bias[h][d] + gain[h][d] * z(t, h, d), where
//   z      a unit-variance process per (h, d) channel, along tokens:
//            AR(1): z_t = rho * z_{t-1} + sqrt(1 - rho^2) * e_t, z_0 = e_0 (stationary,
//            unit variance; rho = 0 gives independent tokens), with innovations e drawn
//            from a standard Gaussian, or a Student-t with `t_dof` degrees of freedom
//            scaled to unit variance (heavy tails; t_dof >= 3 so the variance exists)
//   gain   `std` for ordinary channels; for `outlier_channels` channels per head (chosen
//          by the seed, distinct) std * g with g log-uniform in [outlier_min, outlier_max]
//          — real K caches have a few channels 10-100x larger than the rest
//   bias   per-channel constant offset drawn N(0, channel_bias_std^2) (K caches carry
//          per-channel means; 0 disables it)
// Randomness: xoshiro256** seeded through splitmix64 from `seed`, Gaussians by
// Box-Muller in double, so a seed gives the same tensor on every platform and compiler
// (std::normal_distribution does not promise that). The channel draws (outlier choice,
// gains, biases) come from a stream independent of the token draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::ref {

struct SynthSpec {
  int64_t tokens = 0;
  int32_t heads = 1;
  int32_t head_dim = 128;
  uint64_t seed = 0;
  double std = 1.0;              // > 0
  int32_t t_dof = 0;             // 0: Gaussian innovations; >= 3: Student-t
  int32_t outlier_channels = 0;  // per head, in [0, head_dim]
  double outlier_min = 10.0;     // gain multipliers, 1 <= min <= max
  double outlier_max = 100.0;
  double channel_bias_std = 0.0;  // >= 0
  double rho = 0.0;               // AR(1) correlation along tokens, in [0, 1)
};

// Throws InvalidArgument for out-of-range fields, naming the allowed range.
void validate(const SynthSpec& s);
// [tokens, heads, head_dim] row-major.
std::vector<float> synth_kv(const SynthSpec& s);
// The outlier channel indices of each head ([heads][outlier_channels], ascending).
std::vector<std::vector<int32_t>> synth_outlier_channels(const SynthSpec& s);

// Named presets for sweeps: "gaussian", "heavy_tailed" (t_dof 4, 4 outlier channels of
// 10-100x, channel bias 0.5), "ar1" (rho 0.9), "kcache" (heavy_tailed + rho 0.9).
// Shape and seed come from the arguments.
SynthSpec synth_preset(const std::string& name, int64_t tokens, int32_t heads, int32_t head_dim,
                       uint64_t seed);
const std::vector<std::string>& synth_preset_names();

// The generator, exposed for tests and other seeded fills.
class SynthRng {
 public:
  explicit SynthRng(uint64_t seed);
  uint64_t next_u64();
  double uniform();   // [0, 1), 53 bits
  double gaussian();  // N(0, 1), Box-Muller
 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace kvlab::ref
