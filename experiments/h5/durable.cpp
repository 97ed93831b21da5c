// durable.cpp: crash-safe commits of an in-memory HDF5 file (see durable.h): atomic
// replace for images up to Options::atomic_limit_bytes, a rollback journal beyond.
//
// Journal format (`<path>.rollback`, little-endian):
//   "KVLABRB1"  u64 old_size  u64 page_size  u64 num_pages
//   num_pages x { u64 page_index  u32 length  length bytes (the page's old contents) }
//   u32 crc32 over everything before it
// The CRC seals the journal: a journal without a valid seal was torn while being written,
// before the data file was touched.
#include "experiments/h5/durable.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kvlab::exp::h5 {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'L', 'A', 'B', 'R', 'B', '1'};
constexpr size_t kPage = 4096;

std::string errno_text() {
  return std::strerror(errno);
}

std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path + ": " + errno_text());
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>());
}

void write_all(int fd, const unsigned char* p, size_t n, off_t off, const std::string& what) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(what + ": " + errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += w;
  }
}

void sync_fd(int fd, bool enabled, const std::string& what) {
  if (enabled && fsync(fd) != 0) throw Error("fsync " + what + ": " + errno_text());
}

void sync_dir_of(const std::string& path, bool enabled) {
  if (!enabled) return;
  const auto slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (d >= 0) {
    fsync(d);
    ::close(d);
  }
}

template <class T>
void put(std::vector<unsigned char>& b, T v) {
  unsigned char tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}

template <class T>
bool get(const std::vector<unsigned char>& b, size_t& pos, T* v) {
  if (pos + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

uint32_t crc(const unsigned char* p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt step = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, step);
    p += step;
    n -= step;
  }
  return static_cast<uint32_t>(c);
}

struct Journal {
  uint64_t old_size = 0;
  std::vector<std::pair<uint64_t, std::vector<unsigned char>>> pages;
};

// Parses a journal; false when it is torn (short, bad magic or bad seal).
bool parse_journal(const std::vector<unsigned char>& b, Journal* j) {
  if (b.size() < sizeof(kMagic) + 24 + 4 || std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0)
    return false;
  uint32_t seal = 0;
  std::memcpy(&seal, b.data() + b.size() - 4, 4);
  if (crc(b.data(), b.size() - 4) != seal) return false;
  size_t pos = sizeof(kMagic);
  uint64_t page_size = 0, n = 0;
  if (!get(b, pos, &j->old_size) || !get(b, pos, &page_size) || !get(b, pos, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t idx = 0;
    uint32_t len = 0;
    if (!get(b, pos, &idx) || !get(b, pos, &len) || pos + len > b.size() - 4) return false;
    j->pages.emplace_back(idx * page_size,
                          std::vector<unsigned char>(b.begin() + pos, b.begin() + pos + len));
    pos += len;
  }
  return pos == b.size() - 4;
}

// An open-file-description lock (Linux) on fd: unlike classic fcntl locks it also excludes
// a second writer inside the same process and is not dropped when some other descriptor of
// the file (HDF5's, a reader's) is closed. flock() locks, which HDF5 takes, are independent
// of it, so readers are never blocked. False when another description holds it.
bool try_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  fl.l_pid = 0;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

// Opens `path` read-write and locks it. The atomic replace renames a new inode over the
// name, so a descriptor opened just before a rename may lock the old inode after its writer
// moved on: the inode is compared with the name's afterwards, and the open retried.
int open_locked(const std::string& path, const char* why) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0) throw Error(std::string("cannot open ") + path + " " + why + ": " + errno_text());
    if (!try_lock(fd)) {
      ::close(fd);
      throw Error(path + " is being written by another kvlab process");
    }
    struct stat a {
    }, b{};
    if (fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
      return fd;
    ::close(fd);  // the name moved to a new inode meanwhile: lock that one
  }
  throw Error(path + " keeps being replaced by another kvlab process");
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
      return "removed the temporary file of a commit killed before it replaced the file (the file "
             "was never touched)";
  }
  return "?";
}

Recovery DurableFile::recover(const std::string& path) {
  if (access(journal_path(path).c_str(), F_OK) != 0 && access(temp_path(path).c_str(), F_OK) != 0)
    return Recovery::kNone;
  // Something to undo: only while no writer is live (never roll back under one).
  const int fd = open_locked(path, "to recover it");
  try {
    const Recovery r = recover_locked(path);
    ::close(fd);
    return r;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

// The caller holds the write lock of `path`.
Recovery DurableFile::recover_locked(const std::string& path) {
  Recovery result = Recovery::kNone;
  const std::string tp = temp_path(path);
  if (access(tp.c_str(), F_OK) == 0) {
    if (unlink(tp.c_str()) != 0)
      throw Error("cannot remove the stale temporary " + tp + ": " + errno_text());
    result = Recovery::kRemovedStaleTemp;
  }
  const std::string jp = journal_path(path);
  if (access(jp.c_str(), F_OK) != 0) return result;
  Journal j;
  if (!parse_journal(read_all(jp), &j)) {
    if (unlink(jp.c_str()) != 0)
      throw Error("cannot remove the torn journal " + jp + ": " + errno_text());
    return Recovery::kDiscardedTorn;
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0)
    throw Error("cannot open " + path + " to roll back its interrupted commit: " + errno_text());
  try {
    for (const auto& [off, bytes] : j.pages)
      write_all(fd, bytes.data(), bytes.size(), static_cast<off_t>(off), "roll back " + path);
    if (ftruncate(fd, static_cast<off_t>(j.old_size)) != 0)
      throw Error("truncate " + path + ": " + errno_text());
    sync_fd(fd, true, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (unlink(jp.c_str()) != 0) throw Error("cannot remove the journal " + jp + ": " + errno_text());
  sync_dir_of(path, true);
  return Recovery::kRolledBack;
}

std::unique_ptr<DurableFile> DurableFile::create(const std::string& path, Options opt,
                                                 const std::function<void(File&)>& init) {
  if (access(path.c_str(), F_OK) == 0) throw Error("cannot create " + path + ": it already exists");
  std::unique_ptr<DurableFile> d(new DurableFile());
  d->path_ = path;
  d->opt_ = opt;
  d->file_ = File::create_in_memory(path);
  if (init) init(d->file_);
  d->file_.flush();
  // The first version appears atomically: written to a temporary name, then linked.
  const std::vector<unsigned char> img = d->file_.image();
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot create " + path + ": " + errno_text());
  try {
    write_all(fd, img.data(), img.size(), 0, "write " + tmp);
    sync_fd(fd, opt.fsync, tmp);
  } catch (...) {
    ::close(fd);
    unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  // link() fails if `path` appeared meanwhile (rename would silently replace it).
  if (link(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = errno_text();
    unlink(tmp.c_str());
    throw Error("cannot create " + path + ": " + e);
  }
  unlink(tmp.c_str());
  sync_dir_of(path, opt.fsync);
  d->committed_ = img;
  d->fd_ = open_locked(path, "after creating it");
  return d;
}

std::unique_ptr<DurableFile> DurableFile::open(const std::string& path, Options opt,
                                               Recovery* recovery) {
  std::unique_ptr<DurableFile> d(new DurableFile());
  d->path_ = path;
  d->opt_ = opt;
  d->fd_ =
      open_locked(path, "for writing");  // before recovery: never roll back under a live writer
  const Recovery r = recover_locked(path);
  if (recovery) *recovery = r;
  if (!File::is_hdf5(path)) throw Error(path + " is not an HDF5 file (or its header is corrupt)");
  d->committed_ = read_all(path);
  d->file_ = File::open_image(d->committed_, path);
  return d;
}

DurableFile::~DurableFile() {
  file_.close();  // in memory only: nothing reaches the disk here
  if (fd_ >= 0) ::close(fd_);
}

size_t DurableFile::commit() {
  file_.flush();
  std::vector<unsigned char> img = file_.image();
  if (img == committed_) return 0;
  const size_t n =
      img.size() <= opt_.atomic_limit_bytes ? commit_by_rename(img) : commit_by_journal(img);
  committed_ = std::move(img);
  return n;
}

size_t DurableFile::commit_by_rename(const std::vector<unsigned char>& img) {
  // 1. The whole new image under the temporary name, locked before it gets the real name
  //    (a writer that opens the name after the rename finds the new inode locked).
  const std::string tp = temp_path(path_);
  const int tfd = ::open(tp.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (tfd < 0) throw Error("cannot write " + tp + ": " + errno_text());
  try {
    if (!try_lock(tfd)) throw Error(tp + " is locked by another process");
    struct stat st {};
    if (fstat(fd_, &st) == 0) fchmod(tfd, st.st_mode & 07777);  // keep the file's permissions
    if (crash_after_writes_ >= 0) {
      const size_t n = std::min(img.size(), static_cast<size_t>(crash_after_writes_) * 1024);
      write_all(tfd, img.data(), n, 0, "write " + tp);
      throw Error("test hook: commit abandoned after writing " + std::to_string(n) + " bytes of " +
                  tp);
    }
    write_all(tfd, img.data(), img.size(), 0, "write " + tp);
    sync_fd(tfd, opt_.fsync, tp);
  } catch (...) {
    ::close(tfd);  // a test-hook "crash" leaves the temporary behind, as a kill would
    throw;
  }
  // 2. The switch: atomic for every reader and for process death.
  if (rename(tp.c_str(), path_.c_str()) != 0) {
    const std::string e = errno_text();
    ::close(tfd);
    unlink(tp.c_str());
    throw Error("cannot replace " + path_ + " by " + tp + ": " + e);
  }
  sync_dir_of(path_, opt_.fsync);
  ::close(fd_);  // releases the old inode's lock; the new one is held through tfd
  fd_ = tfd;
  return img.size();
}

size_t DurableFile::commit_by_journal(const std::vector<unsigned char>& img) {
  const std::vector<unsigned char>& old = committed_;
  const size_t old_n = old.size(), new_n = img.size();

  // Pages of the old file that change (or vanish); appended bytes need no undo data.
  std::vector<size_t> dirty;
  for (size_t off = 0; off < old_n; off += kPage) {
    const size_t end_old = std::min(off + kPage, old_n);
    const size_t end_new = std::min(off + kPage, new_n);
    if (end_new != end_old || std::memcmp(old.data() + off, img.data() + off, end_old - off) != 0)
      dirty.push_back(off);
  }
  if (dirty.empty() && new_n == old_n) return 0;

  // 1. The sealed journal.
  std::vector<unsigned char> j(kMagic, kMagic + sizeof(kMagic));
  put<uint64_t>(j, old_n);
  put<uint64_t>(j, kPage);
  put<uint64_t>(j, dirty.size());
  for (size_t off : dirty) {
    const uint32_t len = static_cast<uint32_t>(std::min(kPage, old_n - off));
    put<uint64_t>(j, off / kPage);
    put<uint32_t>(j, len);
    j.insert(j.end(), old.begin() + off, old.begin() + off + len);
  }
  put<uint32_t>(j, crc(j.data(), j.size()));
  const std::string jp = journal_path(path_);
  const int jfd = ::open(jp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (jfd < 0) throw Error("cannot write the journal " + jp + ": " + errno_text());
  try {
    write_all(jfd, j.data(), j.size(), 0, "write " + jp);
    sync_fd(jfd, opt_.fsync, jp);
  } catch (...) {
    ::close(jfd);
    throw;
  }
  ::close(jfd);
  sync_dir_of(path_, opt_.fsync);

  // 2. The data: the new tail first (beyond the old end, harmless to old readers), then
  //    the changed pages, then the new length.
  size_t written = 0;
  long writes = 0;
  auto maybe_crash = [&]() {
    if (crash_after_writes_ >= 0 && writes++ >= crash_after_writes_)
      throw Error("test hook: commit abandoned after " + std::to_string(crash_after_writes_) +
                  " page writes");
  };
  if (new_n > old_n) {
    maybe_crash();
    write_all(fd_, img.data() + old_n, new_n - old_n, static_cast<off_t>(old_n), "write " + path_);
    written += new_n - old_n;
  }
  for (size_t off : dirty) {
    if (off >= new_n) continue;
    maybe_crash();
    const size_t len = std::min(kPage, new_n - off);
    write_all(fd_, img.data() + off, len, static_cast<off_t>(off), "write " + path_);
    written += len;
  }
  if (new_n < old_n && ftruncate(fd_, static_cast<off_t>(new_n)) != 0)
    throw Error("truncate " + path_ + ": " + errno_text());
  sync_fd(fd_, opt_.fsync, path_);

  // 3. Done: the journal goes.
  if (unlink(jp.c_str()) != 0) throw Error("cannot remove the journal " + jp + ": " + errno_text());
  return written;
}

}  // namespace kvlab::exp::h5
