// launch_floor.cpp: bench "launch_floor": the floor under every cold decode timing, timed by
// the harness exactly as the decode rows are (cold L2 flush before every call, the same
// [timing] statistics, eager or one call per CUDA-graph replay). Rows (gpu/bench/launch_floor.h
// describes the kernels):
//   empty                   one block of one warp that does nothing: the timing's own floor;
//   chainN                  one thread, N = 1..3 dependent cold 4-byte loads (decode's
//                           start-up chain: seq_len -> block-table entry -> first page);
//   chainN_page16k          the same chain, then one block reads the 16 KiB page it names;
//   page16k                 the page alone (no chain);
//   ..._primed_X           controls: an untimed kernel between the flush and the timed call
//                           touches the very words and page (lines: L2 warm), words 32 KiB
//                           away in the same 2 MiB pages (pages: TLB warm, lines cold), or as
//                           many words of another allocation (elsewhere: their baseline).
// A row's excess over its (tiny) bandwidth floor is its time: what a decode call at the same
// rules cannot go below, whatever its kernel does.
// Validation before timing (experiments/cuda/launch_floor.cpp): the chain's end or the page's
// per-thread sums against the host's, the untouched output words and the guards.
#include <algorithm>
#include <string>
#include <vector>

#include "experiments/device/device.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"

namespace kvlab::exp {

std::string launch_floor_row_name(const Point& p) {
  const int64_t chain = p.integer("chain");
  const bool page = p.integer("tail_kib") > 0;
  std::string n;
  if (chain == 0 && !page) return "empty";
  if (chain > 0) n = "chain" + std::to_string(chain);
  if (page) n += (n.empty() ? "" : "_") + std::string("page") + p.str("tail_kib") + "k";
  if (p.str("primed") != "none") n += "_primed_" + p.str("primed");
  return n;
}

namespace {

constexpr int64_t kMaxChain = 3;  // gpu::bench::kFloorMaxChain
constexpr int64_t kTailKib = 16;  // gpu::bench::kFloorTailBytes / 1024

bool is_bandwidth_column(const std::string& name) {
  return name == "bytes_per_s" || name == "pct_read_ceiling" || name == "pct_datasheet";
}

class LaunchFloorBench : public Bench {
 public:
  std::string name() const override { return "launch_floor"; }
  std::string summary() const override {
    return "the floor under cold decode timings: an empty kernel and chains of dependent cold "
           "4-byte loads (+ one 16 KiB page), with L2- and TLB-primed controls, timed by the "
           "harness like every decode row";
  }
  bool needs_gpu() const override { return true; }
  std::vector<AxisSpec> axes() const override {
    return {
        AxisSpec{"chain",
                 AxisType::kInt,
                 "0",
                 {},
                 "dependent 4-byte global loads by one thread, each address from the previous "
                 "load, each in its own allocation (0: none)"}
            .range(0, kMaxChain),
        AxisSpec{"tail_kib",
                 AxisType::kInt,
                 "0",
                 {},
                 "then one block of 128 threads reads the page the chain names: 0 (no page) or "
                 "16 KiB"}
            .range(0, kTailKib),
        {"primed",
         AxisType::kEnum,
         "none",
         {"none", "elsewhere", "pages", "lines"},
         "untimed kernel after the flush, before the timed call: none (the floor); elsewhere (as "
         "many reads of another allocation: a kernel in between, nothing warm); pages (a word "
         "32 KiB away from each word and page read: TLB warm, lines cold); lines (the very words "
         "and page: L2 warm)"},
        {"graph",
         AxisType::kEnum,
         "off",
         {"off", "on"},
         "time by CUDA-graph replay, one call per replay after the flush (as decode rows)"},
        AxisSpec{"seed", AxisType::kInt, "0", {}, "positions of the chain's words and page"}.range(
            0, 1000000),
    };
  }
  // record_timing's columns less the bandwidth ones: a rate of at most 16 KiB per call says
  // nothing (and would be a kind's headline); the excess over the floor is the time itself.
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m;
    for (auto& t : timing_metric_specs(CeilingKind::kRead))
      if (!is_bandwidth_column(t.name)) m.push_back(std::move(t));
    return m;
  }
  void check_point(const Point& p) const override {
    const int64_t tail = p.integer("tail_kib");
    if (tail != 0 && tail != kTailKib)
      throw InvalidArgument("tail_kib must be 0 or " + std::to_string(kTailKib) +
                            " (the page read after the chain), got " + p.str("tail_kib"));
    if (p.str("primed") != "none" && p.integer("chain") == 0 && tail == 0)
      throw InvalidArgument("primed = " + p.str("primed") +
                            " needs something to prime: the empty kernel (chain 0, tail_kib 0) "
                            "reads nothing");
  }
  double estimate_seconds(const Point&, const RunContext& ctx) const override {
    // Buffers (at most 76 MiB) and up to max_reps flush + call pairs of ~0.1 ms each.
    return 0.05 + std::min(ctx.timing_cfg.max_seconds, ctx.timing_cfg.max_reps * 1e-4);
  }
  Record run(const Point& p, RunContext& ctx) override {
    Record r = run_launch_floor(p, ctx);
    r.metrics.erase(std::remove_if(r.metrics.begin(), r.metrics.end(),
                                   [](const auto& m) { return is_bandwidth_column(m.first); }),
                    r.metrics.end());
    r.label("kernel", launch_floor_row_name(p));
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_launch_floor_bench() {
  return std::make_unique<LaunchFloorBench>();
}

}  // namespace kvlab::exp
