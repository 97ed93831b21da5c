// overlay.cpp: the "kvlab_overlay" HDF5 file driver (see overlay.h), written against the
// HDF5 1.10 virtual file layer (H5FD_class_t of H5FDpublic.h).
#include "experiments/h5/overlay.h"

#include <H5FDpublic.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "experiments/h5/file_io.h"

namespace kvlab::exp::h5 {
namespace {

// What the file access property list carries to the driver's open callback.
struct OverlayFapl {
  Overlay* overlay;
};

// HDF5's view of an open file: the public part first, as the VFL requires.
struct DriverFile {
  H5FD_t pub;
  std::shared_ptr<Overlay> ov;  // keeps the overlay alive while HDF5 holds the file
};

DriverFile* as_file(H5FD_t* f) {
  return reinterpret_cast<DriverFile*>(f);
}
const DriverFile* as_file(const H5FD_t* f) {
  return reinterpret_cast<const DriverFile*>(f);
}

void* fapl_copy(const void* p) {
  auto* c = static_cast<OverlayFapl*>(std::malloc(sizeof(OverlayFapl)));
  if (c) std::memcpy(c, p, sizeof(OverlayFapl));
  return c;
}
herr_t fapl_free(void* p) {
  std::free(p);
  return 0;
}

H5FD_t* drv_open(const char*, unsigned, hid_t fapl, haddr_t) {
  const auto* fa = static_cast<const OverlayFapl*>(H5Pget_driver_info(fapl));
  if (!fa || !fa->overlay) return nullptr;
  auto* f = new (std::nothrow) DriverFile{};
  if (!f) return nullptr;
  f->ov = fa->overlay->shared_from_this();
  return &f->pub;
}

herr_t drv_close(H5FD_t* f) {
  delete as_file(f);
  return 0;
}

int drv_cmp(const H5FD_t* a, const H5FD_t* b) {
  const Overlay* x = as_file(a)->ov.get();
  const Overlay* y = as_file(b)->ov.get();
  return x < y ? -1 : (x > y ? 1 : 0);
}

herr_t drv_query(const H5FD_t*, unsigned long* flags) {
  // What the POSIX driver allows too: metadata aggregation and accumulation, data sieving,
  // small raw data aggregation (fewer, larger writes: fewer pages per commit).
  if (flags)
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t drv_get_eoa(const H5FD_t* f, H5FD_mem_t) {
  return as_file(f)->ov->eoa_;
}
herr_t drv_set_eoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  as_file(f)->ov->eoa_ = addr;
  return 0;
}
haddr_t drv_get_eof(const H5FD_t* f, H5FD_mem_t) {
  return as_file(f)->ov->eof_;
}
herr_t drv_get_handle(H5FD_t*, hid_t, void**) {
  return -1;  // no POSIX handle to share: writes must go through the overlay
}
herr_t drv_read(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t n, void* buf) {
  return as_file(f)->ov->read(addr, n, buf) ? 0 : -1;
}
herr_t drv_write(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t n, const void* buf) {
  return as_file(f)->ov->write(addr, n, buf) ? 0 : -1;
}
herr_t drv_flush(H5FD_t*, hid_t, hbool_t) {
  return 0;  // durability is the owner's commit, never HDF5's flush
}
herr_t drv_truncate(H5FD_t* f, hid_t, hbool_t) {
  Overlay& ov = *as_file(f)->ov;
  ov.eof_ = ov.eoa_;
  return 0;
}

const H5FD_class_t& driver_class() {
  static const H5FD_class_t cls = [] {
    H5FD_class_t c;
    std::memset(&c, 0, sizeof c);
    c.name = "kvlab_overlay";
    c.maxaddr = (static_cast<haddr_t>(1) << 62);  // far beyond any result file, below off_t
    c.fc_degree = H5F_CLOSE_WEAK;
    c.fapl_size = sizeof(OverlayFapl);
    c.fapl_copy = fapl_copy;
    c.fapl_free = fapl_free;
    c.open = drv_open;
    c.close = drv_close;
    c.cmp = drv_cmp;
    c.query = drv_query;
    c.get_eoa = drv_get_eoa;
    c.set_eoa = drv_set_eoa;
    c.get_eof = drv_get_eof;
    c.get_handle = drv_get_handle;
    c.read = drv_read;
    c.write = drv_write;
    c.flush = drv_flush;
    c.truncate = drv_truncate;
    const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
    std::memcpy(c.fl_map, map, sizeof map);
    return c;
  }();
  return cls;
}

hid_t driver_id() {
  static hid_t id = -1;
  if (id < 0 || H5Iis_valid(id) <= 0) id = H5FDregister(&driver_class());
  if (id < 0) throw Error("cannot register the kvlab_overlay HDF5 file driver");
  return id;
}

}  // namespace

std::shared_ptr<Overlay> Overlay::make(int fd, uint64_t size, std::string name) {
  std::shared_ptr<Overlay> o(new Overlay());
  o->fd_ = fd;
  o->size_ = size;
  o->eof_ = size;
  o->eoa_ = 0;
  o->name_ = std::move(name);
  return o;
}

Id Overlay::fapl() {
  Id p(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!p.valid()) throw Error("H5Pcreate(file access) failed");
  OverlayFapl fa{this};
  if (H5Pset_driver(p.get(), driver_id(), &fa) < 0)
    throw Error("cannot select the kvlab_overlay driver for " + name_);
  // Metadata allocated together (every column of a table at declare time) lands in one
  // region: an appended row then touches few distinct pages.
  H5Pset_meta_block_size(p.get(), 64 * 1024);
  return p;
}

std::string Overlay::take_error() {
  std::string e;
  e.swap(error_);
  return e;
}

void Overlay::committed(int fd, uint64_t size) {
  fd_ = fd;
  size_ = size;
  eof_ = size;
  pages_.clear();
}

void Overlay::read_committed(uint64_t off, void* buf, size_t n) {
  auto* out = static_cast<unsigned char*>(buf);
  size_t got = 0;
  if (fd_ >= 0 && off < size_) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, size_ - off));
    got = read_up_to(fd_, out, want, static_cast<off_t>(off), "read " + name_);
  }
  if (got < n) std::memset(out + got, 0, n - got);
}

Overlay::Page& Overlay::page(uint64_t index) {
  auto it = pages_.find(index);
  if (it != pages_.end()) return it->second;
  Page p(kPage);
  read_committed(index * kPage, p.data(), kPage);
  return pages_.emplace(index, std::move(p)).first->second;
}

bool Overlay::read(uint64_t addr, size_t n, void* buf) {
  auto* out = static_cast<unsigned char*>(buf);
  try {
    while (n > 0) {
      const uint64_t index = addr / kPage, in = addr % kPage;
      auto it = pages_.find(index);
      if (it != pages_.end()) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(n, kPage - in));
        std::memcpy(out, it->second.data() + in, k);
        out += k;
        addr += k;
        n -= k;
        continue;
      }
      // A run of pages not in the overlay: one read from disk.
      uint64_t end = addr + n;
      auto next = pages_.lower_bound(index + 1);
      if (next != pages_.end()) end = std::min<uint64_t>(end, next->first * kPage);
      const size_t k = static_cast<size_t>(end - addr);
      read_committed(addr, out, k);
      out += k;
      addr += k;
      n -= k;
    }
  } catch (const std::exception& e) {
    if (error_.empty()) error_ = e.what();
    return false;
  }
  return true;
}

bool Overlay::write(uint64_t addr, size_t n, const void* buf) {
  const auto* in = static_cast<const unsigned char*>(buf);
  try {
    const uint64_t end = addr + n;
    while (n > 0) {
      const uint64_t index = addr / kPage, at = addr % kPage;
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, kPage - at));
      Page& p = (at == 0 && k == kPage) ? pages_[index] : page(index);
      if (p.size() != kPage) p.resize(kPage);
      std::memcpy(p.data() + at, in, k);
      in += k;
      addr += k;
      n -= k;
    }
    if (end > eof_) eof_ = end;
  } catch (const std::exception& e) {
    if (error_.empty()) error_ = e.what();
    return false;
  }
  return true;
}

}  // namespace kvlab::exp::h5
