// overlay.h: "kvlab_overlay", an HDF5 file driver that reads a committed file from disk and
// keeps every write in memory, page by page, until the owner commits the pages (durable.h).
//
// Why a driver of our own: crash safety needs the new bytes of a commit before any of them
// reach the file (to journal the old contents of the pages they replace), and the cost of a
// commit must be the pages that changed, not the file. HDF5's core driver holds the whole file
// in memory and hands out the whole image (O(file) memory and work per commit); the POSIX
// driver writes in place at any moment. This driver sits between the two: reads come from the
// disk file (pread) unless the page was written since the last commit; writes land in a page
// map. Memory and work per commit are O(pages written). The file on disk is a plain HDF5 file
// (no driver information is stored), readable with any driver.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "experiments/h5/h5.h"

namespace kvlab::exp::h5 {

class Overlay : public std::enable_shared_from_this<Overlay> {
 public:
  static constexpr uint64_t kPage = 4096;
  using Page = std::vector<unsigned char>;  // kPage bytes

  // fd: the committed file, read with pread (-1: nothing committed yet, every byte is new);
  // size: its length. The overlay does not own fd.
  static std::shared_ptr<Overlay> make(int fd, uint64_t size, std::string name);

  // A file access property list for H5Fcreate / H5Fopen that puts this overlay under the file.
  Id fapl();

  // Pages written since the last commit (page index -> bytes), in file order.
  const std::map<uint64_t, Page>& dirty() const { return pages_; }
  uint64_t committed_size() const { return size_; }
  // The length of the file after the next commit: HDF5's end of allocated space.
  uint64_t end() const { return eoa_ > eof_ ? eoa_ : eof_; }
  int fd() const { return fd_; }
  // The first read failure since the last call ("" when none): the driver can only return -1
  // to HDF5, so the owner asks here for the system's reason.
  std::string take_error();

  // The disk now holds every page (under `fd`, `size` bytes long): forget them.
  void committed(int fd, uint64_t size);
  // Committed bytes [off, off + n) from disk; zeros beyond the committed size.
  void read_committed(uint64_t off, void* buf, size_t n);

  // Driver callbacks.
  bool read(uint64_t addr, size_t n, void* buf);
  bool write(uint64_t addr, size_t n, const void* buf);
  uint64_t eoa_ = 0, eof_ = 0;

 private:
  Overlay() = default;
  Page& page(uint64_t index);  // the page, loaded from disk when first written

  int fd_ = -1;
  uint64_t size_ = 0;
  std::string name_;
  std::map<uint64_t, Page> pages_;
  std::string error_;
};

}  // namespace kvlab::exp::h5
