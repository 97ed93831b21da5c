// workload.cpp: synthetic request streams and request validation (see workload.h).
#include "sim/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_set>

#include "reference/core/error.h"
#include "reference/core/mix64.h"
#include "sim/core/text.h"
#include "sim/workload/random.h"

namespace kvlab::sim {

void validate_requests(const std::vector<Request>& requests) {
  std::unordered_set<int64_t> ids;
  ids.reserve(requests.size());
  double last = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    std::ostringstream where;
    where << "request #" << i << " (id " << r.id << ")";
    KVLAB_REQUIRE(ids.insert(r.id).second, where.str() << ": duplicate request id");
    KVLAB_REQUIRE(std::isfinite(r.arrival_s) && r.arrival_s >= 0,
                  where.str() << ": arrival_s " << r.arrival_s << " must be finite and >= 0");
    KVLAB_REQUIRE(r.arrival_s >= last, where.str()
                                           << ": arrival_s " << r.arrival_s
                                           << " is earlier than the previous request's " << last
                                           << " (requests must be sorted by arrival)");
    last = r.arrival_s;
    KVLAB_REQUIRE(r.prompt_tokens >= 1,
                  where.str() << ": prompt_tokens " << r.prompt_tokens << " must be >= 1");
    KVLAB_REQUIRE(r.output_tokens >= 1,
                  where.str() << ": output_tokens " << r.output_tokens << " must be >= 1");
    KVLAB_REQUIRE(r.prefix_group >= 0,
                  where.str() << ": prefix_group " << r.prefix_group << " must be >= 0");
    KVLAB_REQUIRE(r.shared_prefix_tokens >= 0 && r.shared_prefix_tokens <= r.prompt_tokens,
                  where.str() << ": shared_prefix_tokens " << r.shared_prefix_tokens
                              << " outside [0, prompt_tokens " << r.prompt_tokens << "]");
    KVLAB_REQUIRE(r.prefix_group > 0 || r.shared_prefix_tokens == 0,
                  where.str() << ": shared_prefix_tokens " << r.shared_prefix_tokens
                              << " needs a prefix_group > 0 (group 0 means no shared prefix)");
  }
}

// ---- length distributions --------------------------------------------------------------

LengthDist LengthDist::fixed(int64_t v) {
  LengthDist d;
  d.kind = LengthDistKind::kFixed;
  d.value = v;
  d.min = d.max = v;
  return d;
}
LengthDist LengthDist::uniform(int64_t lo, int64_t hi) {
  LengthDist d;
  d.kind = LengthDistKind::kUniform;
  d.min = lo;
  d.max = hi;
  return d;
}
LengthDist LengthDist::lognormal(double median, double sigma, int64_t lo, int64_t hi) {
  LengthDist d;
  d.kind = LengthDistKind::kLogNormal;
  d.median = median;
  d.sigma = sigma;
  d.min = lo;
  d.max = hi;
  return d;
}
LengthDist LengthDist::zipf(double s, int64_t lo, int64_t hi) {
  LengthDist d;
  d.kind = LengthDistKind::kZipf;
  d.s = s;
  d.min = lo;
  d.max = hi;
  return d;
}

namespace {
constexpr int64_t kMaxTokens = 1 << 30;  // lengths are int32 in Request; keep far from overflow
constexpr int64_t kMaxZipfSupport = 1 << 22;  // the Zipf CDF table is [max - min + 1] doubles
}  // namespace

WorkloadSpec scale_lengths(WorkloadSpec spec, double factor) {
  KVLAB_REQUIRE(std::isfinite(factor) && factor > 0,
                "length_scale " << factor << " must be finite and > 0");
  auto scaled = [&](int64_t v) {
    return std::max<int64_t>(1,
                             static_cast<int64_t>(std::llround(static_cast<double>(v) * factor)));
  };
  for (LengthDist* d : {&spec.prompt, &spec.output}) {
    if (d->kind == LengthDistKind::kFixed) d->value = scaled(d->value);
    d->min = scaled(d->min);
    d->max = std::max(d->min, scaled(d->max));
    d->median *= factor;
  }
  spec.shared_prefix_tokens =
      static_cast<int32_t>(std::llround(static_cast<double>(spec.shared_prefix_tokens) * factor));
  return spec;
}

void LengthDist::validate(const std::string& what) const {
  if (kind == LengthDistKind::kFixed) {
    KVLAB_REQUIRE(value >= 1 && value <= kMaxTokens,
                  what << " length: fixed value " << value << " outside [1, " << kMaxTokens << "]");
    return;
  }
  KVLAB_REQUIRE(min >= 1 && min <= max && max <= kMaxTokens,
                what << " length: range [" << min << ", " << max
                     << "] must satisfy 1 <= min <= max <= " << kMaxTokens);
  if (kind == LengthDistKind::kLogNormal) {
    KVLAB_REQUIRE(std::isfinite(median) && median > 0,
                  what << " length: lognormal median " << median << " must be > 0");
    KVLAB_REQUIRE(std::isfinite(sigma) && sigma >= 0,
                  what << " length: lognormal sigma " << sigma << " must be >= 0");
  }
  if (kind == LengthDistKind::kZipf) {
    KVLAB_REQUIRE(std::isfinite(s) && s > 0,
                  what << " length: zipf exponent s " << s << " must be > 0");
    KVLAB_REQUIRE(max - min < kMaxZipfSupport, what << " length: zipf support [" << min << ", "
                                                    << max << "] wider than " << kMaxZipfSupport);
  }
}

std::string LengthDist::str() const {
  std::ostringstream os;
  switch (kind) {
    case LengthDistKind::kFixed:
      os << "fixed(" << value << ")";
      break;
    case LengthDistKind::kUniform:
      os << "uniform[" << min << "," << max << "]";
      break;
    case LengthDistKind::kLogNormal:
      os << "lognormal(median=" << median << ",sigma=" << sigma << ")[" << min << "," << max << "]";
      break;
    case LengthDistKind::kZipf:
      os << "zipf(s=" << s << ")[" << min << "," << max << "]";
      break;
  }
  return os.str();
}

void ArrivalProcess::validate() const {
  if (kind == ArrivalKind::kAllAtOnce) return;
  KVLAB_REQUIRE(std::isfinite(rate) && rate > 0,
                "arrival rate " << rate << " requests/s must be finite and > 0");
  if (kind == ArrivalKind::kBursty)
    KVLAB_REQUIRE(
        std::isfinite(burstiness) && burstiness > 0,
        "arrival burstiness " << burstiness << " must be > 0 (1 = Poisson, < 1 burstier)");
}

std::string ArrivalProcess::str() const {
  std::ostringstream os;
  switch (kind) {
    case ArrivalKind::kPoisson:
      os << "poisson(rate=" << rate << ")";
      break;
    case ArrivalKind::kBursty:
      os << "bursty(rate=" << rate << ",burstiness=" << burstiness << ")";
      break;
    case ArrivalKind::kAllAtOnce:
      os << "all_at_once";
      break;
  }
  return os.str();
}

void WorkloadSpec::validate() const {
  KVLAB_REQUIRE(num_requests >= 0, "workload: num_requests " << num_requests << " must be >= 0");
  arrival.validate();
  prompt.validate("prompt");
  output.validate("output");
  KVLAB_REQUIRE(num_prefix_groups >= 0,
                "workload: num_prefix_groups " << num_prefix_groups << " must be >= 0");
  KVLAB_REQUIRE(shared_prefix_tokens >= 0 && shared_prefix_tokens <= kMaxTokens,
                "workload: shared_prefix_tokens " << shared_prefix_tokens << " outside [0, "
                                                  << kMaxTokens << "]");
  KVLAB_REQUIRE(
      num_prefix_groups > 0 || shared_prefix_tokens == 0,
      "workload: shared_prefix_tokens " << shared_prefix_tokens << " needs num_prefix_groups > 0");
  KVLAB_REQUIRE(shared_prefix_tokens + prompt.max <= kMaxTokens,
                "workload: shared prefix + prompt length exceeds " << kMaxTokens << " tokens");
}

namespace {

// One sampler per length distribution (the Zipf CDF table is built once).
class LengthSampler {
 public:
  explicit LengthSampler(const LengthDist& d) : d_(d) {
    if (d.kind == LengthDistKind::kZipf) {
      cdf_.resize(static_cast<size_t>(d.max - d.min + 1));
      double acc = 0;
      for (int64_t k = d.min; k <= d.max; ++k) {
        acc += std::pow(static_cast<double>(k), -d.s);
        cdf_[static_cast<size_t>(k - d.min)] = acc;
      }
      for (double& c : cdf_) c /= acc;
    }
  }
  int64_t operator()(Rng& rng) const {
    switch (d_.kind) {
      case LengthDistKind::kFixed:
        return d_.value;
      case LengthDistKind::kUniform:
        return rng.uniform_int(d_.min, d_.max);
      case LengthDistKind::kLogNormal: {
        const double mu = std::log(d_.median);
        for (int attempt = 0; attempt < 1000000; ++attempt) {
          const double x = std::exp(mu + d_.sigma * rng.normal());
          const double r = std::nearbyint(x);
          if (r >= static_cast<double>(d_.min) && r <= static_cast<double>(d_.max))
            return static_cast<int64_t>(r);
        }
        throw InvalidArgument("length distribution " + d_.str() +
                              ": under 1e-6 acceptance in [min, max]; widen the range");
      }
      case LengthDistKind::kZipf: {
        const double u = rng.uniform();
        const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
        const int64_t idx =
            std::min<int64_t>(it - cdf_.begin(), static_cast<int64_t>(cdf_.size()) - 1);
        return d_.min + idx;
      }
    }
    return 0;
  }

 private:
  LengthDist d_;
  std::vector<double> cdf_;
};

// Distinct, fixed stream ids so that each quantity has its own generator.
// (SplitMix64's output number `stream` from state `seed`.)
uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  return mix64(seed + kGolden64 * stream);
}

}  // namespace

std::vector<Request> generate_workload(const WorkloadSpec& spec) {
  spec.validate();
  Rng arrivals(stream_seed(spec.seed, 0)), prompts(stream_seed(spec.seed, 1)),
      outputs(stream_seed(spec.seed, 2)), groups(stream_seed(spec.seed, 3));
  const LengthSampler prompt_len(spec.prompt), output_len(spec.output);
  std::vector<Request> out(static_cast<size_t>(spec.num_requests));
  double t = 0;
  for (int64_t i = 0; i < spec.num_requests; ++i) {
    Request& r = out[static_cast<size_t>(i)];
    r.id = i;
    switch (spec.arrival.kind) {
      case ArrivalKind::kPoisson:
        t += arrivals.exponential(spec.arrival.rate);
        break;
      case ArrivalKind::kBursty: {
        const double k = spec.arrival.burstiness;
        t += arrivals.gamma(k, 1.0 / (spec.arrival.rate * k));
        break;
      }
      case ArrivalKind::kAllAtOnce:
        t = 0;
        break;
    }
    r.arrival_s = t;
    r.prompt_tokens = static_cast<int32_t>(prompt_len(prompts));
    r.output_tokens = static_cast<int32_t>(output_len(outputs));
    if (spec.num_prefix_groups > 0) {
      r.prefix_group = static_cast<int32_t>(groups.uniform_int(1, spec.num_prefix_groups));
      r.shared_prefix_tokens = spec.shared_prefix_tokens;
      r.prompt_tokens += spec.shared_prefix_tokens;
    }
  }
  return out;
}

// ---- spec files --------------------------------------------------------------------------

namespace {

LengthDist parse_length(KeyValueFile& f, const std::string& prefix) {
  std::string v;
  TextLocation loc;
  KVLAB_REQUIRE(f.take(prefix, &v, &loc),
                f.source << ": missing key '" << prefix << "' (fixed, uniform, lognormal or zipf)");
  const TextLocation kind_loc = loc;
  auto get_int = [&](const char* key) {
    std::string s;
    TextLocation l;
    KVLAB_REQUIRE(f.take(prefix + "_" + key, &s, &l),
                  kind_loc.str() << " = '" << v << "' needs key '" << prefix << "_" << key << "'");
    return parse_int(s, l);
  };
  auto get_double = [&](const char* key) {
    std::string s;
    TextLocation l;
    KVLAB_REQUIRE(f.take(prefix + "_" + key, &s, &l),
                  kind_loc.str() << " = '" << v << "' needs key '" << prefix << "_" << key << "'");
    return parse_double(s, l);
  };
  LengthDist d;
  if (v == "fixed") {
    d = LengthDist::fixed(get_int("value"));
  } else if (v == "uniform") {
    const int64_t lo = get_int("min");
    d = LengthDist::uniform(lo, get_int("max"));
  } else if (v == "lognormal") {
    const double med = get_double("median");
    const double sig = get_double("sigma");
    const int64_t lo = get_int("min");
    d = LengthDist::lognormal(med, sig, lo, get_int("max"));
  } else if (v == "zipf") {
    const double s = get_double("s");
    const int64_t lo = get_int("min");
    d = LengthDist::zipf(s, lo, get_int("max"));
  } else {
    throw InvalidArgument(kind_loc.str() + " = '" + v +
                          "' is not a length distribution (fixed, uniform, lognormal, zipf)");
  }
  try {
    d.validate(prefix);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(kind_loc.str() + ": " + e.what());
  }
  return d;
}

}  // namespace

WorkloadSpec parse_workload_spec(const std::string& text, const std::string& source) {
  KeyValueFile f = parse_key_value(text, source);
  WorkloadSpec w;
  std::string v;
  TextLocation loc;
  if (f.take("seed", &v, &loc)) {
    const int64_t s = parse_int(v, loc);
    KVLAB_REQUIRE(s >= 0, loc.str() << " = " << s << " must be >= 0");
    w.seed = static_cast<uint64_t>(s);
  }
  KVLAB_REQUIRE(f.take("num_requests", &v, &loc), source << ": missing key 'num_requests'");
  w.num_requests = parse_int(v, loc);
  KVLAB_REQUIRE(w.num_requests >= 0, loc.str() << " = " << w.num_requests << " must be >= 0");
  KVLAB_REQUIRE(f.take("arrival", &v, &loc),
                source << ": missing key 'arrival' (poisson, bursty, all_at_once)");
  const TextLocation arrival_loc = loc;
  if (v == "poisson") {
    w.arrival.kind = ArrivalKind::kPoisson;
  } else if (v == "bursty") {
    w.arrival.kind = ArrivalKind::kBursty;
  } else if (v == "all_at_once") {
    w.arrival.kind = ArrivalKind::kAllAtOnce;
  } else {
    throw InvalidArgument(loc.str() + " = '" + v +
                          "' is not an arrival process (poisson, bursty, all_at_once)");
  }
  if (w.arrival.kind != ArrivalKind::kAllAtOnce) {
    KVLAB_REQUIRE(f.take("rate", &v, &loc), arrival_loc.str()
                                                << " needs key 'rate' (requests per second)");
    w.arrival.rate = parse_double(v, loc);
    KVLAB_REQUIRE(w.arrival.rate > 0, loc.str()
                                          << " = " << w.arrival.rate << " must be > 0 requests/s");
  }
  if (w.arrival.kind == ArrivalKind::kBursty) {
    KVLAB_REQUIRE(f.take("burstiness", &v, &loc), arrival_loc.str()
                                                      << " = 'bursty' needs key 'burstiness'");
    w.arrival.burstiness = parse_double(v, loc);
    KVLAB_REQUIRE(w.arrival.burstiness > 0, loc.str()
                                                << " = " << w.arrival.burstiness << " must be > 0");
  }
  w.prompt = parse_length(f, "prompt");
  w.output = parse_length(f, "output");
  if (f.take("num_prefix_groups", &v, &loc)) {
    const int64_t g = parse_int(v, loc);
    KVLAB_REQUIRE(g >= 0 && g <= INT32_MAX, loc.str() << " = " << g << " outside [0, 2^31-1]");
    w.num_prefix_groups = static_cast<int32_t>(g);
  }
  if (f.take("shared_prefix_tokens", &v, &loc)) {
    const int64_t s = parse_int(v, loc);
    KVLAB_REQUIRE(s >= 0 && s <= kMaxTokens,
                  loc.str() << " = " << s << " outside [0, " << kMaxTokens << "]");
    w.shared_prefix_tokens = static_cast<int32_t>(s);
  }
  f.reject_unknown(
      "seed, num_requests, arrival, rate, burstiness, prompt, "
      "prompt_{value,min,max,median,sigma,s}, output, "
      "output_{value,min,max,median,sigma,s}, num_prefix_groups, shared_prefix_tokens");
  try {
    w.validate();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(source + ": " + e.what());
  }
  return w;
}

WorkloadSpec load_workload_spec(const std::string& path) {
  return parse_workload_spec(read_text_file(path), path);
}

}  // namespace kvlab::sim
