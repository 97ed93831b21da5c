// engine.cpp: continuous batching, preemption, prefix caching and the ledger (engine.h).
#include "sim/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "reference/core/error.h"
#include "reference/core/mix64.h"
#include "sim/alloc/block_table.h"

namespace kvlab::sim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uint64_t kRootHash = 0x6B766C61625F6B76ull;  // parent hash of block 0

}  // namespace

Engine::Engine(EngineConfig cfg, std::shared_ptr<const StepTimeModel> timer)
    : cfg_(cfg), timer_(std::move(timer)) {
  cfg_.validate();
  reset({});
}

void Engine::reset(const std::vector<Request>& requests) {
  validate_requests(requests);
  KVLAB_REQUIRE(requests.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                "engine: " << requests.size() << " requests, above 2^31-1");
  reqs_ = requests;
  state_.assign(reqs_.size(), Req{});
  for (size_t i = 0; i < reqs_.size(); ++i) {
    state_[i].known = reqs_[i].prompt_tokens;
    state_[i].output = reqs_[i].output_tokens;
    state_[i].last_hash = kRootHash;
  }
  pool_ = std::make_unique<BlockPool>(cfg_.num_blocks, cfg_.block_size, cfg_.prefix_caching);
  next_arrival_ = 0;
  waiting_.clear();
  swapped_.clear();
  running_.clear();
  running_.reserve(static_cast<size_t>(cfg_.max_num_seqs));
  batch_.clear();
  batch_.reserve(static_cast<size_t>(cfg_.max_num_seqs));
  shape_ = StepShape{};
  scheduled_ = over_ = false;
  now_ = 0;
  steps_ = 0;
  step_preempted_ = 0;
  step_swap_out_ = step_swap_in_ = 0;
  swap_used_ = 0;
  watermark_blocks_ = cfg_.watermark_blocks();
  logical_tokens_ = 0;
  res_ = SimResult{};
  num_done_ = 0;
  acc_tok = acc_slack = acc_res = acc_cached = acc_free = acc_logical = 0;
  tacc_tok = tacc_slack = tacc_res = tacc_cached = tacc_free = 0;
  acc_running = acc_holding = 0;
  peak_tok = peak_used = 0;
  min_free = cfg_.num_blocks * cfg_.block_size;
  peak_running = 0;
  computed_total_ = 0;
}

void Engine::admit_arrivals() {
  const int64_t usable = cfg_.num_blocks - watermark_blocks_;
  while (next_arrival_ < reqs_.size() && reqs_[next_arrival_].arrival_s <= now_) {
    const int32_t idx = static_cast<int32_t>(next_arrival_++);
    const Request& q = reqs_[idx];
    const int64_t max_cached = static_cast<int64_t>(q.prompt_tokens) + q.output_tokens - 1;
    if (blocks_for_tokens(max_cached, cfg_.block_size) > usable ||
        (!cfg_.chunked_prefill && max_cached > cfg_.max_num_batched_tokens)) {
      state_[idx].state = kRejectedState;
      ++num_done_;
      continue;
    }
    state_[idx].state = kWaiting;
    waiting_.push_back(idx);
  }
}

bool Engine::schedule() {
  if (over_) return false;
  KVLAB_REQUIRE(!scheduled_,
                "Engine::schedule: the previous step was not completed (call complete())");
  if (cfg_.max_steps > 0 && steps_ >= cfg_.max_steps) {
    over_ = true;
    res_.summary.truncated = num_done_ < static_cast<int64_t>(reqs_.size());
    return false;
  }
  step_preempted_ = 0;
  step_swap_out_ = step_swap_in_ = 0;
  for (;;) {
    admit_arrivals();
    if (running_.empty() && waiting_.empty() && swapped_.empty()) {
      if (next_arrival_ < reqs_.size()) {
        now_ = std::max(now_, reqs_[next_arrival_].arrival_s);  // idle until the next arrival
        continue;
      }
      over_ = true;
      return false;
    }
    if (try_schedule()) break;
    // An empty batch is legitimate only when preemption emptied the running set; the next
    // pass admits from the queues. Anything else would loop forever.
    if (step_preempted_ == 0) {
      std::ostringstream os;
      os << "engine stalled at step " << steps_ << ": running " << running_.size() << ", waiting "
         << waiting_.size() << ", swapped " << swapped_.size() << ", available blocks "
         << pool_->available() << ", watermark " << watermark_blocks_;
      throw kvlab::Error(os.str());
    }
  }
  shape_.swap_bytes = (step_swap_out_ + step_swap_in_) * cfg_.block_bytes.total();
  scheduled_ = true;
  return true;
}

bool Engine::allocate_blocks(Req& r, int64_t tokens) {
  const int64_t have = static_cast<int64_t>(r.blocks.size()) * cfg_.block_size;
  const int64_t need = (tokens - have + cfg_.block_size - 1) / cfg_.block_size;
  if (pool_->available() < need) return false;
  for (int64_t k = 0; k < need; ++k) r.blocks.push_back(pool_->allocate());
  sync_cursor(r);
  return true;
}

inline void Engine::add_to_batch(int32_t idx, int64_t n) {
  Req& r = state_[idx];
  const int64_t c = r.computed;
  batch_.emplace_back();
  ScheduledSeq& s = batch_.back();
  s.request = idx;
  s.start = c;
  s.num_tokens = static_cast<int32_t>(n);
  if (n == 1) {
    ++shape_.num_decode_seqs;
    shape_.decode_context_tokens += c + 1;
  } else {
    ++shape_.num_prefill_seqs;
    shape_.prefill_tokens += n;
    shape_.prefill_attn_pairs +=
        static_cast<double>(n) * static_cast<double>(c) + 0.5 * static_cast<double>(n) * (n + 1);
    shape_.prefill_context_tokens += c + n;
  }
  if (c + n == r.known) ++shape_.num_sampled;
  if (!r.has_first_scheduled) {
    r.has_first_scheduled = true;
    r.first_scheduled = now_;
  }
}

void Engine::release_blocks(Req& r) {
  // Tail-first: the tail blocks enter the prefix cache's eviction list first (evicted
  // first), and private blocks are pushed so that the first block ends on top.
  for (size_t k = r.blocks.size(); k-- > 0;) pool_->release(r.blocks[k]);
  r.blocks.clear();
  r.cur_block = -1;
}

void Engine::preempt(int32_t idx) {
  Req& r = state_[idx];
  // Victims are never scheduled yet in this step, so they hold exactly the blocks of their
  // cached tokens (on-demand allocation); those are what a swap copies.
  const int64_t n = blocks_for_tokens(r.computed, cfg_.block_size);
  KVLAB_REQUIRE(n == static_cast<int64_t>(r.blocks.size()),
                "engine: preempted request " << reqs_[idx].id << " holds " << r.blocks.size()
                                             << " blocks for " << r.computed << " tokens");
  logical_tokens_ -= r.computed;
  ++step_preempted_;
  if (cfg_.preemption == PreemptionMode::kSwap && swap_used_ + n <= cfg_.swap_blocks) {
    step_swap_out_ += n;
    swap_used_ += n;
    r.swapped_blocks = static_cast<int32_t>(n);
    ++r.swaps;
    ++res_.summary.num_swaps;
    release_blocks(r);
    r.state = kSwapped;
    swapped_.push_back(idx);
    return;
  }
  if (cfg_.preemption == PreemptionMode::kSwap) ++res_.summary.num_swap_fallbacks;
  r.discarded_tokens += r.computed;
  release_blocks(r);
  r.computed = 0;
  r.hashed_blocks = 0;
  r.last_hash = kRootHash;
  r.fill_block = r.fill_offset = 0;
  ++r.preemptions;
  ++res_.summary.num_preemptions;
  r.state = kWaiting;
  waiting_.push_front(idx);
}

uint64_t Engine::block_hash(int32_t idx, uint64_t parent, int64_t j) const {
  const Request& q = reqs_[idx];
  const bool shared = (j + 1) * cfg_.block_size <= q.shared_prefix_tokens;
  const uint64_t owner =
      shared ? (static_cast<uint64_t>(q.prefix_group) << 1) | 1u : static_cast<uint64_t>(q.id) << 1;
  return mix64(parent ^ mix64(owner ^ mix64(static_cast<uint64_t>(j))));
}

int64_t Engine::prefix_hits(int32_t idx, std::vector<int32_t>* hit_blocks) {
  const Req& r = state_[idx];
  const int64_t max_hits = (r.known - 1) / cfg_.block_size;
  uint64_t h = kRootHash;
  for (int64_t j = 0; j < max_hits; ++j) {
    const uint64_t hj = block_hash(idx, h, j);
    const int32_t b = pool_->lookup(hj);
    if (b < 0) break;
    hit_blocks->push_back(b);
    h = hj;
  }
  return static_cast<int64_t>(hit_blocks->size()) * cfg_.block_size;
}

bool Engine::try_schedule() {
  batch_.clear();
  shape_ = StepShape{};
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted_now = false;
  const int32_t bs = cfg_.block_size;

  // 1. Running requests, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    if (i + 16 < running_.size()) __builtin_prefetch(&state_[running_[i + 16]]);
    const int32_t idx = running_[i];
    Req& r = state_[idx];
    const int64_t n = std::min(r.known - r.computed, budget);
    bool self = false;
    while (!ensure_blocks(r, r.computed + n)) {
      const int32_t victim = running_.back();
      running_.pop_back();
      preempt(victim);
      preempted_now = true;
      if (victim == idx) {
        self = true;
        break;
      }
    }
    if (self) break;
    add_to_batch(idx, n);
    budget -= n;
    ++i;
  }
  if (preempted_now) return !batch_.empty();

  // 2. Swapped requests come back first.
  while (!swapped_.empty() && static_cast<int32_t>(running_.size()) < cfg_.max_num_seqs &&
         budget > 0) {
    const int32_t idx = swapped_.front();
    Req& r = state_[idx];
    const int64_t n = std::min(r.known - r.computed, budget);
    const int64_t need = blocks_for_tokens(r.computed + n, bs);
    if (pool_->available() - need < watermark_blocks_) break;
    swapped_.pop_front();
    for (int32_t k = 0; k < r.swapped_blocks; ++k) {
      const int32_t b = pool_->allocate();
      pool_->fill(b, static_cast<int32_t>(
                         std::min<int64_t>(bs, r.computed - static_cast<int64_t>(k) * bs)));
      r.blocks.push_back(b);
    }
    step_swap_in_ += r.swapped_blocks;
    swap_used_ -= r.swapped_blocks;
    r.swapped_blocks = 0;
    r.fill_block = static_cast<int32_t>(r.computed / bs);
    r.fill_offset = static_cast<int32_t>(r.computed % bs);
    sync_cursor(r);
    ensure_blocks(r, r.computed + n);  // fits: checked against `need` above
    r.state = kRunning;
    running_.push_back(idx);
    logical_tokens_ += r.computed;
    add_to_batch(idx, n);
    budget -= n;
  }
  if (!swapped_.empty()) return !batch_.empty();  // waiting requests do not overtake swapped ones

  // 3. Waiting requests (new arrivals, recompute-preempted ones at the front).
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < cfg_.max_num_seqs &&
         budget > 0) {
    const int32_t idx = waiting_.front();
    Req& r = state_[idx];
    hit_scratch_.clear();
    const int64_t hit_tokens = cfg_.prefix_caching ? prefix_hits(idx, &hit_scratch_) : 0;
    const int64_t remaining = r.known - hit_tokens;
    if (!cfg_.chunked_prefill && remaining > budget) break;
    const int64_t n = std::min(remaining, budget);
    const int64_t target = cfg_.reserve == ReservePolicy::kFullSequence
                               ? static_cast<int64_t>(reqs_[idx].prompt_tokens) + r.output - 1
                               : hit_tokens + n;
    const int64_t hits = static_cast<int64_t>(hit_scratch_.size());
    const int64_t need = blocks_for_tokens(target, bs) - hits;
    int64_t hits_cached = 0;  // hits now in the eviction list stop being available
    for (int32_t b : hit_scratch_) hits_cached += pool_->is_cached(b) ? 1 : 0;
    if (pool_->available() - hits_cached - need < watermark_blocks_) break;
    waiting_.pop_front();
    uint64_t h = kRootHash;
    for (int64_t j = 0; j < hits; ++j) {
      pool_->add_ref(hit_scratch_[j]);
      r.blocks.push_back(hit_scratch_[j]);
      h = block_hash(idx, h, j);
    }
    r.last_hash = h;
    r.hashed_blocks = static_cast<int32_t>(hits);
    r.computed = hit_tokens;
    r.fill_block = static_cast<int32_t>(hits);
    r.fill_offset = 0;
    r.hit_tokens += hit_tokens;
    if (cfg_.prefix_caching) {
      res_.summary.prefix_hit_tokens += hit_tokens;
      res_.summary.prefix_query_tokens += r.known;
    }
    for (int64_t k = 0; k < need; ++k) r.blocks.push_back(pool_->allocate());
    sync_cursor(r);
    r.state = kRunning;
    running_.push_back(idx);
    logical_tokens_ += hit_tokens;
    add_to_batch(idx, n);
    budget -= n;
  }
  return !batch_.empty();
}

void Engine::complete(double duration_s) {
  KVLAB_REQUIRE(scheduled_, "Engine::complete: no step is scheduled (call schedule() first)");
  KVLAB_REQUIRE(duration_s < 0 || std::isfinite(duration_s),
                "Engine::complete: duration " << duration_s << " s is not finite");
  StepCost cost;
  if (duration_s < 0) {
    KVLAB_REQUIRE(timer_ != nullptr,
                  "Engine::complete: no step-time model and no measured duration");
    cost = timer_->step_cost(shape_);
  } else {
    cost.total_s = duration_s;
  }
  now_ += cost.total_s;
  const int32_t bs = cfg_.block_size;
  int32_t finished = 0;
  const size_t nb = batch_.size();
  for (size_t i = 0; i < nb; ++i) {
    // Software prefetch a few sequences ahead: the request's hot line, then the metadata of
    // the block being filled (each step touches them once, in a scattered order).
    if (i + 16 < nb) __builtin_prefetch(&state_[batch_[i + 16].request]);
    if (i + 8 < nb) {
      const int32_t b = state_[batch_[i + 8].request].cur_block;
      if (b >= 0) __builtin_prefetch(pool_->fill_address(b));
    }
    const ScheduledSeq& s = batch_[i];
    Req& r = state_[s.request];
    int64_t left = s.num_tokens;
    while (left > 0) {
      const int32_t b = r.cur_block;
      const int32_t k = static_cast<int32_t>(std::min<int64_t>(left, bs - r.fill_offset));
      pool_->fill_from(b, r.fill_offset, k);
      r.fill_offset += k;
      left -= k;
      if (r.fill_offset == bs) {
        if (cfg_.prefix_caching && r.hashed_blocks == r.fill_block) {
          const uint64_t h = block_hash(s.request, r.last_hash, r.fill_block);
          pool_->register_block(b, h);  // false: same content already cached; b stays private
          r.last_hash = h;
          ++r.hashed_blocks;
        }
        ++r.fill_block;
        r.fill_offset = 0;
        sync_cursor(r);
      }
    }
    r.computed += s.num_tokens;
    logical_tokens_ += s.num_tokens;
    computed_total_ += s.num_tokens;
    if (r.computed == r.known) {
      ++r.generated;
      ++r.known;
      if (!r.has_first_token) {
        r.has_first_token = true;
        r.first_token = now_;
      }
      if (r.generated == r.output) {
        r.finish = now_;
        logical_tokens_ -= r.computed;
        release_blocks(r);
        r.state = kDone;
        ++num_done_;
        ++finished;
      }
    }
  }
  if (finished > 0)
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](int32_t i) { return state_[i].state == kDone; }),
                   running_.end());
  ++steps_;
  scheduled_ = false;
  pool_->check();
  if (cfg_.audit_every_step) audit();
  record_step(cost, finished);
}

void Engine::record_step(const StepCost& cost, int32_t finished) {
  const LedgerCounts c = pool_->counts();
  const double dt = cost.total_s;
  acc_tok += c.token_slots;
  acc_slack += c.slack_slots;
  acc_res += c.reserved_slots;
  acc_cached += c.cached_slots;
  acc_free += c.free_slots;
  acc_logical += logical_tokens_;
  tacc_tok += dt * c.token_slots;
  tacc_slack += dt * c.slack_slots;
  tacc_res += dt * c.reserved_slots;
  tacc_cached += dt * c.cached_slots;
  tacc_free += dt * c.free_slots;
  acc_running += static_cast<double>(running_.size());
  peak_tok = std::max(peak_tok, c.token_slots);
  peak_used = std::max(peak_used, c.token_slots + c.slack_slots + c.reserved_slots);
  min_free = std::min(min_free, c.free_slots);
  peak_running = std::max(peak_running, static_cast<int32_t>(running_.size()));
  res_.summary.busy_time_s += dt;
  res_.summary.swap_out_blocks += step_swap_out_;
  res_.summary.swap_in_blocks += step_swap_in_;
  if (cfg_.trace_every == 0 || (steps_ - 1) % cfg_.trace_every != 0) return;
  StepTrace& t = res_.steps;
  t.step.push_back(steps_ - 1);
  t.time_s.push_back(now_);
  t.duration_s.push_back(dt);
  t.num_seqs.push_back(static_cast<int32_t>(batch_.size()));
  t.num_decode_seqs.push_back(static_cast<int32_t>(shape_.num_decode_seqs));
  t.num_prefill_seqs.push_back(static_cast<int32_t>(shape_.num_prefill_seqs));
  t.num_tokens.push_back(shape_.total_tokens());
  t.decode_context_tokens.push_back(shape_.decode_context_tokens);
  t.num_running.push_back(static_cast<int32_t>(running_.size()));
  t.num_waiting.push_back(static_cast<int32_t>(waiting_.size()));
  t.num_swapped.push_back(static_cast<int32_t>(swapped_.size()));
  t.num_preempted.push_back(step_preempted_);
  t.num_finished.push_back(finished);
  t.swap_out_blocks.push_back(step_swap_out_);
  t.swap_in_blocks.push_back(step_swap_in_);
  t.gemm_s.push_back(cost.gemm_s);
  t.attention_s.push_back(cost.attention_s);
  t.other_s.push_back(cost.other_s);
  t.launch_s.push_back(cost.launch_s);
  t.swap_s.push_back(cost.swap_s);
  LedgerTrace& l = res_.ledger;
  l.token_slots.push_back(c.token_slots);
  l.slack_slots.push_back(c.slack_slots);
  l.reserved_slots.push_back(c.reserved_slots);
  l.cached_slots.push_back(c.cached_slots);
  l.free_slots.push_back(c.free_slots);
  l.logical_tokens.push_back(logical_tokens_);
  l.used_blocks.push_back(static_cast<int32_t>(c.used_blocks));
  l.cached_blocks.push_back(static_cast<int32_t>(c.cached_blocks));
  l.free_blocks.push_back(static_cast<int32_t>(c.free_blocks));
}

void Engine::audit() const {
  pool_->audit();
  const int32_t bs = cfg_.block_size;
  std::vector<int32_t> refs(static_cast<size_t>(cfg_.num_blocks), 0);
  int64_t logical = 0, swap = 0;
  for (size_t i = 0; i < state_.size(); ++i) {
    const Req& r = state_[i];
    std::ostringstream err;
    if (r.state == kRunning) {
      logical += r.computed;
      if (static_cast<int64_t>(r.blocks.size()) < blocks_for_tokens(r.computed, bs))
        err << "holds " << r.blocks.size() << " blocks for " << r.computed << " tokens";
      if (static_cast<int64_t>(r.fill_block) * bs + r.fill_offset != r.computed)
        err << "fill cursor " << r.fill_block << "/" << r.fill_offset << " vs " << r.computed
            << " tokens";
      const int32_t cur =
          static_cast<size_t>(r.fill_block) < r.blocks.size() ? r.blocks[r.fill_block] : -1;
      if (cur != r.cur_block) err << "cursor block " << r.cur_block << ", expected " << cur;
      for (size_t k = 0; k < r.blocks.size(); ++k) {
        ++refs[static_cast<size_t>(r.blocks[k])];
        const int32_t want = static_cast<int64_t>(k) < r.fill_block    ? bs
                             : static_cast<int64_t>(k) == r.fill_block ? r.fill_offset
                                                                       : 0;
        if (pool_->fill_of(r.blocks[k]) != want)
          err << "block " << r.blocks[k] << " (#" << k << ") fill " << pool_->fill_of(r.blocks[k])
              << ", expected " << want;
      }
    } else if (!r.blocks.empty()) {
      err << "holds " << r.blocks.size() << " blocks while not running";
    }
    if (r.state == kSwapped) swap += r.swapped_blocks;
    if (!err.str().empty())
      throw kvlab::Error("engine audit, request " + std::to_string(reqs_[i].id) + ": " + err.str());
  }
  for (int32_t b = 0; b < cfg_.num_blocks; ++b)
    if (refs[static_cast<size_t>(b)] != pool_->ref_of(b))
      throw kvlab::Error("engine audit: block " + std::to_string(b) + " referenced by " +
                         std::to_string(refs[static_cast<size_t>(b)]) +
                         " requests, pool ref count " + std::to_string(pool_->ref_of(b)));
  if (logical != logical_tokens_ || swap != swap_used_)
    throw kvlab::Error("engine audit: logical tokens " + std::to_string(logical) + " vs counter " +
                       std::to_string(logical_tokens_) + ", swap blocks " + std::to_string(swap) +
                       " vs " + std::to_string(swap_used_));
}

SimResult Engine::run(const std::vector<Request>& requests) {
  reset(requests);
  while (schedule()) complete();
  return results();
}

SimResult Engine::results() const {
  SimResult r = res_;
  finalize_summary(&r);
  return r;
}

void Engine::finalize_summary(SimResult* out) const {
  RequestResults& q = out->requests;
  SimSummary& s = out->summary;
  const size_t n = reqs_.size();
  q = RequestResults{};
  std::vector<double> ttft, tpot, e2e;
  for (size_t i = 0; i < n; ++i) {
    const Request& in = reqs_[i];
    const Req& r = state_[i];
    q.id.push_back(in.id);
    q.arrival_s.push_back(in.arrival_s);
    q.prompt_tokens.push_back(in.prompt_tokens);
    q.output_tokens.push_back(in.output_tokens);
    const RequestStatus st = r.state == kDone            ? RequestStatus::kFinished
                             : r.state == kRejectedState ? RequestStatus::kRejected
                                                         : RequestStatus::kUnfinished;
    q.status.push_back(static_cast<int32_t>(st));
    q.first_scheduled_s.push_back(r.has_first_scheduled ? r.first_scheduled : kNaN);
    q.first_token_s.push_back(r.has_first_token ? r.first_token : kNaN);
    q.ttft_s.push_back(r.has_first_token ? r.first_token - in.arrival_s : kNaN);
    const bool done = st == RequestStatus::kFinished;
    q.finish_s.push_back(done ? r.finish : kNaN);
    q.e2e_s.push_back(done ? r.finish - in.arrival_s : kNaN);
    q.tpot_s.push_back(
        done && in.output_tokens > 1 ? (r.finish - r.first_token) / (in.output_tokens - 1) : kNaN);
    q.num_preemptions.push_back(r.preemptions);
    q.num_swaps.push_back(r.swaps);
    q.prefix_hit_tokens.push_back(r.hit_tokens);
    q.discarded_tokens.push_back(r.discarded_tokens);
    if (done) {
      ++s.num_finished;
      s.prompt_tokens += in.prompt_tokens;
      s.output_tokens += in.output_tokens;
      ttft.push_back(q.ttft_s.back());
      tpot.push_back(q.tpot_s.back());
      e2e.push_back(q.e2e_s.back());
    } else if (st == RequestStatus::kRejected) {
      ++s.num_rejected;
    } else {
      ++s.num_unfinished;
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double a = 0;
    int64_t k = 0;
    for (double x : v)
      if (std::isfinite(x)) a += x, ++k;
    return k > 0 ? a / k : kNaN;
  };
  s.num_steps = steps_;
  s.sim_time_s = now_;
  s.num_requests = static_cast<int64_t>(n);
  s.computed_tokens = computed_total_;
  s.output_tokens_per_s = now_ > 0 ? static_cast<double>(s.output_tokens) / now_ : 0;
  s.mean_ttft_s = mean(ttft);
  s.p50_ttft_s = percentile(ttft, 50);
  s.p90_ttft_s = percentile(ttft, 90);
  s.p99_ttft_s = percentile(ttft, 99);
  s.mean_tpot_s = mean(tpot);
  s.p50_tpot_s = percentile(tpot, 50);
  s.p90_tpot_s = percentile(tpot, 90);
  s.p99_tpot_s = percentile(tpot, 99);
  s.mean_e2e_s = mean(e2e);
  s.p99_e2e_s = percentile(e2e, 99);
  s.num_evictions = pool_->num_evictions();
  const double steps = static_cast<double>(std::max<int64_t>(steps_, 1));
  const double busy = s.busy_time_s > 0 ? s.busy_time_s : 1.0;
  s.mean_running = acc_running / steps;
  s.peak_running = peak_running;
  LedgerSummary& l = s.ledger;
  l.capacity_blocks = cfg_.num_blocks;
  l.block_size = cfg_.block_size;
  l.capacity_slots = cfg_.num_blocks * cfg_.block_size;
  l.block_bytes = cfg_.block_bytes;
  l.capacity_bytes = cfg_.num_blocks * cfg_.block_bytes.total();
  l.per_request_bytes = cfg_.per_request_bytes;
  l.mean_token_slots = acc_tok / steps;
  l.mean_slack_slots = acc_slack / steps;
  l.mean_reserved_slots = acc_res / steps;
  l.mean_cached_slots = acc_cached / steps;
  l.mean_free_slots = acc_free / steps;
  l.time_mean_token_slots = tacc_tok / busy;
  l.time_mean_slack_slots = tacc_slack / busy;
  l.time_mean_reserved_slots = tacc_res / busy;
  l.time_mean_cached_slots = tacc_cached / busy;
  l.time_mean_free_slots = tacc_free / busy;
  l.peak_token_slots = peak_tok;
  l.peak_used_slots = peak_used;
  l.min_free_slots = min_free;
  l.mean_slack_per_seq = acc_running > 0 ? acc_slack / acc_running : 0;
  l.mean_reserved_per_seq = acc_running > 0 ? acc_res / acc_running : 0;
  l.mean_logical_tokens = acc_logical / steps;
  l.mean_state_bytes = s.mean_running * static_cast<double>(cfg_.per_request_bytes);
}

void Engine::batch_block_table(int32_t max_blocks_per_seq, std::vector<int32_t>* table,
                               std::vector<int32_t>* seq_lens) const {
  KVLAB_REQUIRE(scheduled_, "Engine::batch_block_table: valid between schedule() and complete()");
  KVLAB_REQUIRE(table != nullptr && seq_lens != nullptr, "Engine::batch_block_table: null output");
  table->assign(batch_.size() * static_cast<size_t>(std::max(max_blocks_per_seq, 0)), -1);
  seq_lens->clear();
  for (size_t i = 0; i < batch_.size(); ++i) {
    const auto& blocks = state_[batch_[i].request].blocks;
    const int64_t len = batch_[i].start + batch_[i].num_tokens;
    const int64_t used = blocks_for_tokens(len, cfg_.block_size);
    KVLAB_REQUIRE(used <= max_blocks_per_seq,
                  "Engine::batch_block_table: request "
                      << reqs_[batch_[i].request].id << " needs " << used
                      << " blocks, more than max_blocks_per_seq " << max_blocks_per_seq);
    std::copy(blocks.begin(), blocks.begin() + used,
              table->begin() + static_cast<int64_t>(i) * max_blocks_per_seq);
    seq_lens->push_back(static_cast<int32_t>(len));
  }
}

void Engine::batch_slot_mapping(std::vector<int64_t>* slots) const {
  KVLAB_REQUIRE(scheduled_, "Engine::batch_slot_mapping: valid between schedule() and complete()");
  KVLAB_REQUIRE(slots != nullptr, "Engine::batch_slot_mapping: null output");
  slots->clear();
  const int32_t bs = cfg_.block_size;
  for (const ScheduledSeq& s : batch_) {
    const auto& blocks = state_[s.request].blocks;
    for (int64_t t = s.start; t < s.start + s.num_tokens; ++t)
      slots->push_back(
          slot_of(blocks[static_cast<size_t>(t / bs)], static_cast<int32_t>(t % bs), bs));
  }
}

const std::vector<int32_t>& Engine::request_blocks(int32_t request) const {
  KVLAB_REQUIRE(request >= 0 && static_cast<size_t>(request) < state_.size(),
                "Engine::request_blocks: request index " << request << " outside [0, "
                                                         << state_.size() << ")");
  return state_[static_cast<size_t>(request)].blocks;
}

}  // namespace kvlab::sim
