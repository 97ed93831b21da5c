// file_io.cpp: see file_io.h.
#include "experiments/h5/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "experiments/h5/h5.h"

namespace kvlab::exp {
namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

}  // namespace

std::string dir_of(const std::string& p) {
  const auto s = p.find_last_of('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
}

std::string resolve_output_path(const std::string& path, const std::string& what) {
  struct stat l {};
  if (lstat(path.c_str(), &l) != 0) {
    // A new file (ENOTDIR: a parent is a file; creating the directory reports it).
    if (errno == ENOENT || errno == ENOTDIR) return path;
    throw InvalidArgument(what + " " + path + ": " + errno_text(errno));
  }
  std::string target = path;
  if (S_ISLNK(l.st_mode)) {
    char* real = realpath(path.c_str(), nullptr);
    if (real) {
      target = real;
      std::free(real);
    } else {
      // A link to a file still to be made: its target, when the target's folder exists.
      char buf[4096];
      const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
      std::string link = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      if (!link.empty() && link[0] != '/') link = dir_of(path) + "/" + link;
      struct stat d {};
      if (link.empty() || lstat(link.c_str(), &d) == 0 || stat(dir_of(link).c_str(), &d) != 0 ||
          !S_ISDIR(d.st_mode))
        throw InvalidArgument(what + " " + path +
                              " is a dangling symlink (its target and the target's folder do "
                              "not exist); give the target path itself");
      return link;
    }
  }
  struct stat st {};
  if (stat(target.c_str(), &st) != 0)
    throw InvalidArgument(what + " " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    throw InvalidArgument(what + " " + path + (target != path ? " (-> " + target + ")" : "") +
                          " is " + kind_of(st.st_mode) + ", not a regular file");
  return target;
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw InvalidArgument(what + " " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    throw InvalidArgument(what + " " + path + " is " + kind_of(st.st_mode) +
                          ", not a regular file");
}

void throw_path_error(const std::string& what, int e) {
  const std::string msg = what + ": " + errno_text(e);
  if (e == ENOENT || e == ENOTDIR || e == EACCES || e == EPERM || e == EISDIR || e == ELOOP ||
      e == ENAMETOOLONG || e == EEXIST)
    throw h5::Error(msg);
  throw IoError(msg, e);
}

void write_all(int fd, const void* data, size_t n, off_t off, const std::string& what) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw IoError(what + ": " + errno_text(e), e);
    }
    if (w == 0) throw IoError(what + ": the write made no progress", EIO);
    p += w;
    n -= static_cast<size_t>(w);
    off += w;
  }
}

size_t read_up_to(int fd, void* data, size_t n, off_t off, const std::string& what) {
  auto* p = static_cast<unsigned char*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, p + got, n - got, off + static_cast<off_t>(got));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw IoError(what + ": " + errno_text(e), e);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void sync_fd(int fd, bool enabled, const std::string& what) {
  if (enabled && fsync(fd) != 0) {
    const int e = errno;
    throw IoError("fsync " + what + ": " + errno_text(e), e);
  }
}

void sync_dir_of(const std::string& path, bool enabled) {
  if (!enabled) return;
  const int d = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (d >= 0) {
    fsync(d);  // best effort: some file systems refuse fsync on directories
    ::close(d);
  }
}

bool try_write_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  fl.l_pid = 0;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

int open_locked(const std::string& path, const std::string& why) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw_path_error("cannot open " + path + " " + why, errno);
    if (!try_write_lock(fd)) {
      ::close(fd);
      throw h5::Error(path + " is being written by another kvlab process");
    }
    struct stat a {
    }, b{};
    if (fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
      return fd;
    ::close(fd);  // the name moved to a new inode meanwhile: lock that one
  }
  throw h5::Error(path + " keeps being replaced by another kvlab process");
}

uint32_t crc32_of(const void* data, size_t n, uint32_t start) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = start;
  while (n > 0) {
    const uInt step = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, step);
    p += step;
    n -= step;
  }
  return static_cast<uint32_t>(c);
}

namespace {
// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid (overlong
// forms, surrogates and code points above U+10FFFF are invalid, as in Python's decoder; NUL
// is treated as invalid too).
size_t utf8_len(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c == 0) return 0;  // HDF5 strings end at NUL: escaped so that what is stored is all of it
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}
}  // namespace

int64_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len(s, i);
    if (n == 0) return static_cast<int64_t>(i);
    i += n;
  }
  return -1;
}

std::string utf8_safe(const std::string& s) {
  if (first_invalid_utf8(s) < 0) return s;
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len(s, i);
    if (n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace kvlab::exp
