// block_table.cpp: per-sequence block lists, block tables and slot mappings.
#include "sim/alloc/block_table.h"

#include <algorithm>
#include <limits>

namespace kvlab::sim {

BlockTable::BlockTable(BlockAllocator* allocator, int32_t block_size)
    : allocator_(allocator), block_size_(block_size) {
  KVLAB_REQUIRE(allocator != nullptr, "BlockTable: null allocator");
  KVLAB_REQUIRE(block_size >= 1, "BlockTable: block_size " << block_size << " must be >= 1");
}

const BlockTable::Seq& BlockTable::get(int64_t seq_id, const char* what) const {
  auto it = seqs_.find(seq_id);
  KVLAB_REQUIRE(it != seqs_.end(), "BlockTable::" << what << ": unknown sequence " << seq_id);
  return it->second;
}
BlockTable::Seq& BlockTable::get(int64_t seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  KVLAB_REQUIRE(it != seqs_.end(), "BlockTable::" << what << ": unknown sequence " << seq_id);
  return it->second;
}

void BlockTable::add_sequence(int64_t seq_id) {
  KVLAB_REQUIRE(!has_sequence(seq_id),
                "BlockTable::add_sequence: sequence " << seq_id << " already exists");
  seqs_.emplace(seq_id, Seq{});
}

void BlockTable::append_tokens(int64_t seq_id, int64_t n, std::vector<int64_t>* slots) {
  KVLAB_REQUIRE(n >= 0, "BlockTable::append_tokens: negative token count " << n << " for sequence "
                                                                           << seq_id);
  Seq& s = get(seq_id, "append_tokens");
  const int64_t need =
      blocks_for_tokens(s.num_tokens + n, block_size_) - static_cast<int64_t>(s.blocks.size());
  if (need > 0) allocator_->acquire(need, &s.blocks);  // throws OutOfBlocks with no change
  if (slots) {
    slots->reserve(slots->size() + static_cast<size_t>(n));
    for (int64_t t = s.num_tokens; t < s.num_tokens + n; ++t)
      slots->push_back(
          slot_of(s.blocks[t / block_size_], static_cast<int32_t>(t % block_size_), block_size_));
  }
  s.num_tokens += n;
}

void BlockTable::free_sequence(int64_t seq_id) {
  Seq& s = get(seq_id, "free_sequence");
  std::vector<int32_t> tail_first(s.blocks.rbegin(), s.blocks.rend());
  allocator_->release(tail_first);
  seqs_.erase(seq_id);
}

int64_t BlockTable::num_tokens(int64_t seq_id) const {
  return get(seq_id, "num_tokens").num_tokens;
}

const std::vector<int32_t>& BlockTable::blocks(int64_t seq_id) const {
  return get(seq_id, "blocks").blocks;
}

int64_t BlockTable::slot(int64_t seq_id, int64_t t) const {
  const Seq& s = get(seq_id, "slot");
  KVLAB_REQUIRE(t >= 0 && t < s.num_tokens, "BlockTable::slot: token "
                                                << t << " outside [0, " << s.num_tokens
                                                << ") of sequence " << seq_id);
  return slot_of(s.blocks[t / block_size_], static_cast<int32_t>(t % block_size_), block_size_);
}

void BlockTable::build_block_table(const std::vector<int64_t>& seq_ids, int32_t max_blocks_per_seq,
                                   int32_t pad, std::vector<int32_t>* out) const {
  KVLAB_REQUIRE(out != nullptr, "BlockTable::build_block_table: null output");
  KVLAB_REQUIRE(max_blocks_per_seq >= 0, "BlockTable::build_block_table: max_blocks_per_seq "
                                             << max_blocks_per_seq << " is negative");
  out->assign(seq_ids.size() * static_cast<size_t>(max_blocks_per_seq), pad);
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const Seq& s = get(seq_ids[i], "build_block_table");
    KVLAB_REQUIRE(static_cast<int64_t>(s.blocks.size()) <= max_blocks_per_seq,
                  "BlockTable::build_block_table: sequence "
                      << seq_ids[i] << " holds " << s.blocks.size()
                      << " blocks, more than max_blocks_per_seq " << max_blocks_per_seq);
    std::copy(s.blocks.begin(), s.blocks.end(),
              out->begin() + static_cast<int64_t>(i) * max_blocks_per_seq);
  }
}

std::vector<int32_t> BlockTable::seq_lens(const std::vector<int64_t>& seq_ids) const {
  std::vector<int32_t> lens;
  lens.reserve(seq_ids.size());
  for (int64_t id : seq_ids) {
    const int64_t n = get(id, "seq_lens").num_tokens;
    KVLAB_REQUIRE(n <= std::numeric_limits<int32_t>::max(),
                  "BlockTable::seq_lens: sequence " << id << " has " << n
                                                    << " tokens, above the int32 seq_lens range");
    lens.push_back(static_cast<int32_t>(n));
  }
  return lens;
}

int32_t BlockTable::max_blocks(const std::vector<int64_t>& seq_ids) const {
  size_t m = 0;
  for (int64_t id : seq_ids) m = std::max(m, get(id, "max_blocks").blocks.size());
  return static_cast<int32_t>(m);
}

}  // namespace kvlab::sim
