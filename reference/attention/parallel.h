// parallel.h: the reference's one threading helper (host only).
//
// The reference is single-threaded math; only independent work items (sequence x KV head,
// token chunks) are spread over std::threads, so results never depend on the thread count.
// Threads are used only when the work is large enough to pay for them. KVLAB_REF_THREADS=<n>
// caps the count (1 = serial), e.g. on a shared CI machine.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvlab::ref {

inline int reference_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  if (n < 1) n = 1;
  if (const char* env = std::getenv("KVLAB_REF_THREADS")) {
    const int cap = std::atoi(env);
    if (cap >= 1) n = std::min(n, cap);
  }
  return std::min(n, 32);
}

// Calls fn(i) for i in [0, items). `work` estimates the total cost in element operations;
// below ~4M the loop runs on the calling thread. The first exception is rethrown here.
template <typename Fn>
void parallel_for(int64_t items, int64_t work, Fn&& fn) {
  const int threads = static_cast<int>(std::min<int64_t>(reference_threads(), items));
  if (threads <= 1 || work < (int64_t{1} << 22)) {
    for (int64_t i = 0; i < items; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto body = [&] {
    for (int64_t i = next++; i < items; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = items;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body);
  body();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kvlab::ref
