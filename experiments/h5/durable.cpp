// durable.cpp: crash-safe commits of an HDF5 file edited through the overlay driver (see
// durable.h).
//
// Rollback journal `<path>.rollback`, little-endian:
//   "KVLABRB2"
//   u64 st_dev  u64 st_ino         the data file it belongs to
//   u64 old_size  u64 new_size     the file's length before / after the commit
//   u32 page_size (4096)  u32 sector_size (512)  u64 n
//   n x { u64 offset  u32 old_len  u32 new_len
//         old_len bytes: the page's old contents
//         ceil(new_len / 512) x u32: CRC-32 of each 512-byte sector of the page's new contents }
//   u32 CRC-32 of everything before it (the seal)
// The seal is written (and fsynced) before the first page of the file changes: a journal
// without a valid seal was torn while being written, before the file was touched. Journals of
// the previous format ("KVLABRB1", no owner) are never applied: recovery reports them.
#include "experiments/h5/durable.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "experiments/h5/overlay.h"

namespace kvlab::exp::h5 {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'L', 'A', 'B', 'R', 'B', '2'};
constexpr char kMagicV1[8] = {'K', 'V', 'L', 'A', 'B', 'R', 'B', '1'};
constexpr uint64_t kPage = Overlay::kPage;
constexpr uint64_t kSector = 512;
// The first bytes of every HDF5 file without a user block, and what they read while a commit
// changes pages in place ("kvlab transaction").
constexpr unsigned char kHdf5Signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
constexpr unsigned char kPoison[8] = {'K', 'V', 'L', 'A', 'B', 'T', 'R', 'N'};

std::string errno_text(int e) {
  return std::strerror(e);
}

bool exists(const std::string& p) {
  return access(p.c_str(), F_OK) == 0;
}

[[noreturn]] void throw_open_error(const std::string& what, int e) {
  throw_path_error(what, e);
}

template <class T>
void put(std::vector<unsigned char>& b, T v) {
  unsigned char tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  b.insert(b.end(), tmp, tmp + sizeof(T));
}

template <class T>
bool get(const std::vector<unsigned char>& b, size_t& pos, T* v) {
  if (pos + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

struct JournalEntry {
  uint64_t offset = 0;
  std::vector<unsigned char> old_bytes;
  uint32_t new_len = 0;
  std::vector<uint32_t> new_sector_crc;
};

struct Journal {
  uint64_t dev = 0, ino = 0, old_size = 0, new_size = 0;
  std::vector<JournalEntry> entries;
};

std::vector<unsigned char> encode(const Journal& j) {
  std::vector<unsigned char> b(kMagic, kMagic + sizeof(kMagic));
  put<uint64_t>(b, j.dev);
  put<uint64_t>(b, j.ino);
  put<uint64_t>(b, j.old_size);
  put<uint64_t>(b, j.new_size);
  put<uint32_t>(b, static_cast<uint32_t>(kPage));
  put<uint32_t>(b, static_cast<uint32_t>(kSector));
  put<uint64_t>(b, j.entries.size());
  for (const auto& e : j.entries) {
    put<uint64_t>(b, e.offset);
    put<uint32_t>(b, static_cast<uint32_t>(e.old_bytes.size()));
    put<uint32_t>(b, e.new_len);
    b.insert(b.end(), e.old_bytes.begin(), e.old_bytes.end());
    for (uint32_t c : e.new_sector_crc) put<uint32_t>(b, c);
  }
  put<uint32_t>(b, crc32_of(b.data(), b.size()));
  return b;
}

enum class Parse { kOk, kTorn, kOldFormat };

Parse decode(const std::vector<unsigned char>& b, Journal* j) {
  if (b.size() >= sizeof(kMagic) + 4 && std::memcmp(b.data(), kMagicV1, sizeof(kMagicV1)) == 0) {
    uint32_t seal = 0;
    std::memcpy(&seal, b.data() + b.size() - 4, 4);
    return crc32_of(b.data(), b.size() - 4) == seal ? Parse::kOldFormat : Parse::kTorn;
  }
  if (b.size() < sizeof(kMagic) + 48 + 4 || std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0)
    return Parse::kTorn;
  uint32_t seal = 0;
  std::memcpy(&seal, b.data() + b.size() - 4, 4);
  if (crc32_of(b.data(), b.size() - 4) != seal) return Parse::kTorn;
  size_t pos = sizeof(kMagic);
  uint32_t page = 0, sector = 0;
  uint64_t n = 0;
  if (!get(b, pos, &j->dev) || !get(b, pos, &j->ino) || !get(b, pos, &j->old_size) ||
      !get(b, pos, &j->new_size) || !get(b, pos, &page) || !get(b, pos, &sector) ||
      !get(b, pos, &n) || page != kPage || sector != kSector)
    return Parse::kTorn;
  const size_t end = b.size() - 4;
  for (uint64_t i = 0; i < n; ++i) {
    JournalEntry e;
    uint32_t old_len = 0;
    if (!get(b, pos, &e.offset) || !get(b, pos, &old_len) || !get(b, pos, &e.new_len) ||
        old_len > kPage || e.new_len > kPage || pos + old_len > end)
      return Parse::kTorn;
    e.old_bytes.assign(b.begin() + static_cast<std::ptrdiff_t>(pos),
                       b.begin() + static_cast<std::ptrdiff_t>(pos + old_len));
    pos += old_len;
    e.new_sector_crc.resize((e.new_len + kSector - 1) / kSector);
    for (auto& c : e.new_sector_crc)
      if (!get(b, pos, &c)) return Parse::kTorn;
    j->entries.push_back(std::move(e));
  }
  return pos == end ? Parse::kOk : Parse::kTorn;
}

std::vector<unsigned char> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_open_error("cannot read " + path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw IoError("stat " + path + ": " + errno_text(e), e);
  }
  std::vector<unsigned char> b(static_cast<size_t>(st.st_size));
  try {
    b.resize(read_up_to(fd, b.data(), b.size(), 0, "read " + path));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return b;
}

// Removes `tp` when no live process holds its lock (a leftover of a killed writer). Returns
// whether it was removed; throws when a live writer holds it.
bool remove_stale_temp(const std::string& tp) {
  const int fd = ::open(tp.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw_open_error("cannot open " + tp, errno);
  }
  const bool free = try_write_lock(fd);
  if (!free) {
    ::close(fd);
    throw Error(tp + " is being written by another kvlab process");
  }
  const bool removed = unlink(tp.c_str()) == 0;
  const int e = errno;
  ::close(fd);
  if (!removed && e != ENOENT)
    throw IoError("cannot remove the stale temporary " + tp + ": " + errno_text(e), e);
  return removed;
}

// Does the file (current length cur_size) hold, in every sector the entry covers, either the
// old bytes or the new ones? Returns "" when it does, else where it does not.
std::string sector_mismatch(int fd, uint64_t cur_size, const JournalEntry& e,
                            const std::string& p) {
  const uint64_t span = std::max<uint64_t>(e.old_bytes.size(), e.new_len);
  unsigned char cur[kSector];
  for (uint64_t s = 0; s * kSector < span; ++s) {
    const uint64_t at = e.offset + s * kSector;
    const uint64_t want_old = s * kSector < e.old_bytes.size()
                                  ? std::min<uint64_t>(kSector, e.old_bytes.size() - s * kSector)
                                  : 0;
    const uint64_t want_new =
        s * kSector < e.new_len ? std::min<uint64_t>(kSector, e.new_len - s * kSector) : 0;
    const uint64_t have = at < cur_size ? std::min<uint64_t>(kSector, cur_size - at) : 0;
    const size_t got =
        have ? read_up_to(fd, cur, static_cast<size_t>(have), static_cast<off_t>(at), "read " + p)
             : 0;
    // A commit killed in place left the signature poisoned: compare what it stood for.
    if (at == 0 && got >= sizeof kPoison && std::memcmp(cur, kPoison, sizeof kPoison) == 0)
      std::memcpy(cur, kHdf5Signature, sizeof kHdf5Signature);
    // Bytes beyond the old sector's length (a grown tail) do not matter: rollback cuts them.
    const bool is_old =
        got >= want_old && std::memcmp(cur, e.old_bytes.data() + s * kSector, want_old) == 0;
    const uint32_t crc_new =
        s < e.new_sector_crc.size() ? e.new_sector_crc[s] : crc32_of(nullptr, 0);
    const bool is_new = got >= want_new && crc32_of(cur, static_cast<size_t>(want_new)) == crc_new;
    if (!is_old && !is_new) return "offset " + std::to_string(at);
  }
  return "";
}

}  // namespace

std::string to_string(Recovery r) {
  switch (r) {
    case Recovery::kNone:
      return "none";
    case Recovery::kRolledBack:
      return "rolled back an interrupted commit";
    case Recovery::kDiscardedTorn:
      return "discarded a torn journal (the interrupted commit had not started)";
    case Recovery::kRemovedStaleTemp:
      return "removed the temporary file of a killed writer (the file was never touched)";
    case Recovery::kRemovedStaleJournal:
      return "removed a stale journal that belonged to another file of this name (not applied)";
  }
  return "?";
}

bool DurableFile::needs_recovery(const std::string& path) {
  return exists(journal_path(path)) || exists(temp_path(path));
}

Recovery DurableFile::recover(const std::string& path) {
  if (!needs_recovery(path)) return Recovery::kNone;
  // Something to undo: only while no writer is live (never roll back under one).
  const int fd = open_locked(path, "to recover it");
  try {
    const Recovery r = recover_locked(path, fd);
    ::close(fd);
    return r;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

// The caller holds the write lock of `path` through fd.
Recovery DurableFile::recover_locked(const std::string& path, int fd) {
  Recovery result = Recovery::kNone;
  if (remove_stale_temp(temp_path(path))) result = Recovery::kRemovedStaleTemp;
  const std::string jp = journal_path(path);
  if (!exists(jp)) return result;
  Journal j;
  const Parse parsed = decode(read_file(jp), &j);
  if (parsed == Parse::kTorn) {
    if (unlink(jp.c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove the torn journal " + jp + ": " + errno_text(errno), errno);
    return Recovery::kDiscardedTorn;
  }
  if (parsed == Parse::kOldFormat)
    throw Error("cannot recover " + path + ": " + jp +
                " is a rollback journal of an older kvlab, which does not record the file it "
                "belongs to, so it is not applied; if `kvlab check " +
                path + "` reports the file intact, delete the journal");
  struct stat st {};
  if (fstat(fd, &st) != 0) throw IoError("stat " + path + ": " + errno_text(errno), errno);
  if (static_cast<uint64_t>(st.st_dev) != j.dev || static_cast<uint64_t>(st.st_ino) != j.ino) {
    // The file it was written for is gone; this one must not be touched.
    if (unlink(jp.c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove the stale journal " + jp + ": " + errno_text(errno), errno);
    return Recovery::kRemovedStaleJournal;
  }
  const uint64_t cur = static_cast<uint64_t>(st.st_size);
  const uint64_t lo = std::min(j.old_size, j.new_size), hi = std::max(j.old_size, j.new_size);
  std::string bad;
  if (cur < lo || cur > hi)
    bad = "its length " + std::to_string(cur) + " is outside [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]";
  for (size_t i = 0; bad.empty() && i < j.entries.size(); ++i)
    bad = sector_mismatch(fd, cur, j.entries[i], path);
  if (!bad.empty())
    throw Error("cannot recover " + path + ": its journal " + jp + " does not match the file (" +
                bad +
                " holds neither the bytes before nor after the interrupted commit); it was not "
                "applied. Something else wrote the file since; inspect it with `kvlab check`");
  for (const auto& e : j.entries)
    write_all(fd, e.old_bytes.data(), e.old_bytes.size(), static_cast<off_t>(e.offset),
              "roll back " + path);
  if (ftruncate(fd, static_cast<off_t>(j.old_size)) != 0)
    throw IoError("truncate " + path + ": " + errno_text(errno), errno);
  sync_fd(fd, true, path);
  if (unlink(jp.c_str()) != 0)
    throw IoError("cannot remove the journal " + jp + ": " + errno_text(errno), errno);
  sync_dir_of(path, true);
  return Recovery::kRolledBack;
}

std::unique_ptr<DurableFile> DurableFile::create(const std::string& path, Options opt,
                                                 const std::function<void(File&)>& init) {
  if (exists(path)) throw Error("cannot create " + path + ": it already exists");
  std::unique_ptr<DurableFile> d(new DurableFile());
  d->path_ = path;
  d->opt_ = opt;
  d->overlay_ = Overlay::make(-1, 0, path);
  {
    Id fapl = d->overlay_->fapl();
    d->file_ = File::create_with(path, fapl.get());
  }
  if (init) init(d->file_);
  d->file_.flush();
  if (const std::string e = d->overlay_->take_error(); !e.empty()) throw IoError(e, EIO);

  // The first version appears atomically: written under the temporary name (locked, so a
  // second creator can tell a live one from a leftover), then linked to the real name.
  const std::string tp = temp_path(path);
  remove_stale_temp(tp);
  const int fd = ::open(tp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_open_error("cannot create " + path, errno);
  const uint64_t size = d->overlay_->end();
  try {
    if (!try_write_lock(fd)) throw Error(tp + " is locked by another process");
    for (const auto& [index, page] : d->overlay_->dirty()) {
      const uint64_t off = index * kPage;
      if (off >= size) break;
      write_all(fd, page.data(), static_cast<size_t>(std::min<uint64_t>(kPage, size - off)),
                static_cast<off_t>(off), "write " + tp);
      d->stats_.data_bytes += std::min<uint64_t>(kPage, size - off);
    }
    if (ftruncate(fd, static_cast<off_t>(size)) != 0)
      throw IoError("extend " + tp + ": " + errno_text(errno), errno);
    sync_fd(fd, opt.fsync, tp);
    // link() fails if `path` appeared meanwhile (rename would silently replace it).
    if (link(tp.c_str(), path.c_str()) != 0) throw_open_error("cannot create " + path, errno);
  } catch (...) {
    unlink(tp.c_str());
    ::close(fd);
    throw;
  }
  unlink(tp.c_str());
  sync_dir_of(path, opt.fsync);
  d->fd_ = fd;  // the same inode as `path` now, and locked
  d->overlay_->committed(fd, size);
  d->stats_.commits = 1;
  return d;
}

std::unique_ptr<DurableFile> DurableFile::open(const std::string& path, Options opt,
                                               Recovery* recovery) {
  std::unique_ptr<DurableFile> d(new DurableFile());
  d->path_ = path;
  d->opt_ = opt;
  // The lock before recovery: never roll back under a live writer.
  d->fd_ = open_locked(path, "for writing");
  const Recovery r = recover_locked(path, d->fd_);
  if (recovery) *recovery = r;
  if (!File::is_hdf5(path)) throw Error(path + " is not an HDF5 file (or its header is corrupt)");
  struct stat st {};
  if (fstat(d->fd_, &st) != 0) throw IoError("stat " + path + ": " + errno_text(errno), errno);
  d->overlay_ = Overlay::make(d->fd_, static_cast<uint64_t>(st.st_size), path);
  Id fapl = d->overlay_->fapl();
  d->file_ = File::open_with(path, fapl.get(), /*writable=*/true);
  return d;
}

DurableFile::~DurableFile() {
  file_.close();  // into the overlay only: nothing reaches the disk here
  if (fd_ >= 0) ::close(fd_);
}

uint64_t DurableFile::committed_bytes() const {
  return overlay_ ? overlay_->committed_size() : 0;
}

size_t DurableFile::commit() {
  if (broken_)
    throw IoError("an earlier commit of " + path_ +
                      " failed; the file holds the last complete commit and this writer must stop",
                  EIO);
  file_.flush();
  if (const std::string e = overlay_->take_error(); !e.empty()) {
    broken_ = true;
    throw IoError(e, EIO);
  }
  const uint64_t new_size = overlay_->end();
  if (overlay_->dirty().empty() && new_size == overlay_->committed_size()) return 0;
  size_t n = 0;
  try {
    bool in_place = false;
    if (opt_.protocol != Commit::kReplace) {
      // LOCK_EX excludes HDF5 readers (they open with LOCK_SH) while pages change in place;
      // when one holds the file open, it keeps a snapshot through an atomic replace instead.
      const bool no_reader = flock(fd_, LOCK_EX | LOCK_NB) == 0;
      in_place = no_reader || opt_.protocol == Commit::kJournal;
    }
    if (in_place) {
      n = commit_in_place(new_size);
      flock(fd_, LOCK_UN);
    } else {
      n = commit_by_replace(new_size);
      if (opt_.protocol == Commit::kAuto) ++stats_.replaced;
    }
  } catch (...) {
    broken_ = true;
    flock(fd_, LOCK_UN);
    throw;
  }
  overlay_->committed(fd_, new_size);
  ++stats_.commits;
  return n;
}

size_t DurableFile::commit_in_place(uint64_t new_size) {
  const uint64_t old_size = overlay_->committed_size();
  const auto& pages = overlay_->dirty();
  // 1. The journal: old contents of every page the commit overwrites below the old length,
  //    and of every page a shorter file would cut off.
  struct stat st {};
  if (fstat(fd_, &st) != 0) throw IoError("stat " + path_ + ": " + errno_text(errno), errno);
  Journal j;
  j.dev = static_cast<uint64_t>(st.st_dev);
  j.ino = static_cast<uint64_t>(st.st_ino);
  j.old_size = old_size;
  j.new_size = new_size;
  auto journal_page = [&](uint64_t index, const unsigned char* now) {
    JournalEntry e;
    e.offset = index * kPage;
    e.old_bytes.resize(static_cast<size_t>(std::min<uint64_t>(kPage, old_size - e.offset)));
    overlay_->read_committed(e.offset, e.old_bytes.data(), e.old_bytes.size());
    e.new_len =
        e.offset < new_size ? static_cast<uint32_t>(std::min(kPage, new_size - e.offset)) : 0;
    std::vector<unsigned char> fresh(e.new_len);
    if (e.new_len) {
      if (now)
        std::memcpy(fresh.data(), now, e.new_len);
      else
        overlay_->read_committed(e.offset, fresh.data(), e.new_len);
    }
    for (uint32_t s = 0; s * kSector < e.new_len; ++s)
      e.new_sector_crc.push_back(crc32_of(fresh.data() + s * kSector,
                                          std::min<uint64_t>(kSector, e.new_len - s * kSector)));
    j.entries.push_back(std::move(e));
  };
  for (const auto& [index, page] : pages)
    if (index * kPage < old_size) journal_page(index, page.data());
  for (uint64_t off = (new_size / kPage) * kPage; off < old_size; off += kPage)
    if (!pages.count(off / kPage)) journal_page(off / kPage, nullptr);
  // Page 0 (the superblock) is always journaled: its signature is poisoned while pages change.
  if (!pages.count(0) && old_size > 0 && new_size > 0) journal_page(0, nullptr);
  const std::vector<unsigned char> jb = encode(j);
  const std::string jp = journal_path(path_);
  const int jfd = ::open(jp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (jfd < 0) throw IoError("cannot write the journal " + jp + ": " + errno_text(errno), errno);
  try {
    write_all(jfd, jb.data(), jb.size(), 0, "write " + jp);
    sync_fd(jfd, opt_.fsync, jp);
  } catch (const IoError& e) {
    ::close(jfd);
    unlink(jp.c_str());  // the file was not touched: the commit simply did not happen
    throw IoError(std::string(e.what()) + " (nothing of this commit reached " + path_ +
                      ": it holds the previous commit)",
                  e.error_number());
  }
  ::close(jfd);
  sync_dir_of(path_, opt_.fsync);
  stats_.journal_bytes += jb.size();

  // 2. The file's HDF5 signature is poisoned first and restored last: while the pages change
  //    in place (and after a kill in the middle, until recovery) every HDF5 reader finds "not
  //    an HDF5 file", never a torn file it could misread. Then the pages (the tail beyond the
  //    old length among them), the new length, page 0, and one fsync.
  size_t written = 0;
  long writes = 0;
  unsigned char head[sizeof(kHdf5Signature)] = {};
  const bool poison = old_size >= sizeof head && new_size >= sizeof head &&
                      read_up_to(fd_, head, sizeof head, 0, "read " + path_) == sizeof head &&
                      std::memcmp(head, kHdf5Signature, sizeof head) == 0;
  auto write_page = [&](uint64_t index, const unsigned char* data) {
    const uint64_t off = index * kPage;
    if (crash_after_writes_ >= 0 && writes++ >= crash_after_writes_) {
      crash_after_writes_ = -1;
      broken_ = true;
      throw Error("test hook: commit abandoned after " + std::to_string(writes - 1) +
                  " page writes");
    }
    const size_t len = static_cast<size_t>(std::min(kPage, new_size - off));
    write_all(fd_, data, len, static_cast<off_t>(off), "write " + path_);
    written += len;
  };
  try {
    if (poison) write_all(fd_, kPoison, sizeof kPoison, 0, "write " + path_);
    for (const auto& [index, page] : pages)
      if (index != 0 && index * kPage < new_size) write_page(index, page.data());
    if (new_size != old_size && ftruncate(fd_, static_cast<off_t>(new_size)) != 0)
      throw IoError("set the length of " + path_ + ": " + errno_text(errno), errno);
    if (auto p0 = pages.find(0); p0 != pages.end()) {
      write_page(0, p0->second.data());
    } else if (poison) {
      write_all(fd_, head, sizeof head, 0, "write " + path_);
    }
    sync_fd(fd_, opt_.fsync, path_);
  } catch (const IoError& e) {
    // Undo at once from the journal we still hold: the file becomes the last commit again.
    // The length first: cutting the new tail frees the blocks this commit took, so that on a
    // full disk the old bytes (which may land in blocks the file system has to allocate again)
    // still fit.
    try {
      if (ftruncate(fd_, static_cast<off_t>(old_size)) != 0)
        throw IoError("truncate " + path_ + ": " + errno_text(errno), errno);
      for (const auto& en : j.entries) {
        // Zero bytes are restored by punching a hole (no block to allocate: a page that was a
        // hole before this commit, and whose write is what filled the disk, stays one).
        const bool zeros = std::all_of(en.old_bytes.begin(), en.old_bytes.end(),
                                       [](unsigned char c) { return c == 0; });
        if (zeros && !en.old_bytes.empty() &&
            fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(en.offset), static_cast<off_t>(en.old_bytes.size())) == 0)
          continue;
        write_all(fd_, en.old_bytes.data(), en.old_bytes.size(), static_cast<off_t>(en.offset),
                  "roll back " + path_);
      }
      sync_fd(fd_, opt_.fsync, path_);
      unlink(jp.c_str());
    } catch (const std::exception& r) {
      throw IoError(std::string(e.what()) + "; undoing the partial commit failed too (" + r.what() +
                        "): run `kvlab recover " + path_ +
                        "` once the system is healthy (the journal " + jp + " is kept)",
                    e.error_number());
    }
    throw IoError(std::string(e.what()) + " (the partial commit was undone: " + path_ +
                      " holds the previous commit)",
                  e.error_number());
  }
  stats_.data_bytes += written;

  // 3. Done: the journal goes (a journal resurrected by a power loss right now would undo this
  //    commit, which is consistent: the previous commit, one point less).
  if (unlink(jp.c_str()) != 0)
    throw IoError("cannot remove the journal " + jp + ": " + errno_text(errno), errno);
  return written + jb.size();
}

size_t DurableFile::commit_by_replace(uint64_t new_size) {
  const uint64_t old_size = overlay_->committed_size();
  const std::string tp = temp_path(path_);
  remove_stale_temp(tp);
  const int tfd = ::open(tp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (tfd < 0) throw IoError("cannot write " + tp + ": " + errno_text(errno), errno);
  size_t written = 0;
  try {
    // Locked before it gets the real name: a writer that opens the name after the rename
    // finds the new inode locked.
    if (!try_write_lock(tfd)) throw Error(tp + " is locked by another process");
    struct stat st {};
    if (fstat(fd_, &st) == 0) fchmod(tfd, st.st_mode & 07777);  // keep the file's permissions
    // Test hook: a budget of bytes, then a "crash" before the rename.
    const int64_t budget =
        crash_after_writes_ >= 0 ? static_cast<int64_t>(crash_after_writes_) * 1024 : -1;
    auto emit = [&](const unsigned char* p, size_t len, uint64_t off) {
      size_t part = len;
      if (budget >= 0)
        part = static_cast<size_t>(
            std::min<int64_t>(static_cast<int64_t>(len),
                              std::max<int64_t>(0, budget - static_cast<int64_t>(written))));
      write_all(tfd, p, part, static_cast<off_t>(off), "write " + tp);
      written += part;
      if (part < len) {
        crash_after_writes_ = -1;
        throw Error("test hook: commit abandoned after writing " + std::to_string(written) +
                    " bytes of " + tp);
      }
    };
    const uint64_t keep = std::min(old_size, new_size);
    std::vector<unsigned char> buf(size_t{1} << 20);
    for (uint64_t off = 0; off < keep; off += buf.size()) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), keep - off));
      overlay_->read_committed(off, buf.data(), len);
      emit(buf.data(), len, off);
    }
    for (const auto& [index, page] : overlay_->dirty()) {
      const uint64_t off = index * kPage;
      if (off >= new_size) continue;
      emit(page.data(), static_cast<size_t>(std::min(kPage, new_size - off)), off);
    }
    if (budget >= 0) {
      crash_after_writes_ = -1;
      throw Error("test hook: commit abandoned before the rename of " + tp);
    }
    if (ftruncate(tfd, static_cast<off_t>(new_size)) != 0)
      throw IoError("set the length of " + tp + ": " + errno_text(errno), errno);
    sync_fd(tfd, opt_.fsync, tp);
    // The switch: atomic for every reader and for process death.
    if (rename(tp.c_str(), path_.c_str()) != 0)
      throw IoError("cannot replace " + path_ + " by " + tp + ": " + errno_text(errno), errno);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("test hook", 0) != 0) unlink(tp.c_str());
    ::close(tfd);  // a test-hook "crash" leaves the temporary behind, as a kill would
    throw;
  } catch (...) {
    unlink(tp.c_str());
    ::close(tfd);
    throw;
  }
  sync_dir_of(path_, opt_.fsync);
  ::close(fd_);  // releases the old inode's lock; the new one is held through tfd
  fd_ = tfd;
  stats_.data_bytes += written;
  return written;
}

}  // namespace kvlab::exp::h5
