// file_io.h: the operating-system side of result files: I/O errors, path checks, locks,
// durable writes.
//
// Two kinds of failure are kept apart, because a user acts on them differently:
//   - bad input (a FIFO or a directory given as --out, a dangling symlink, a file of another
//     schema): InvalidArgument, exit code 2, detected before anything is written;
//   - an I/O failure of the system while reading or writing (disk full, quota, EIO, a file
//     size limit): IoError, exit code 3. The commit that failed is cleaned up first, so the
//     file on disk is the last complete commit.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "reference/core/error.h"

namespace kvlab::exp {

// An operating-system failure while reading or writing a file (exit code 3). `err` is the
// errno value (0 when unknown).
class IoError : public kvlab::Error {
 public:
  IoError(const std::string& what, int err) : kvlab::Error(what), errno_(err) {}
  int error_number() const { return errno_; }

 private:
  int errno_ = 0;
};

// The exit codes of every kvlab command (cli.h repeats them in its usage text).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;    // some points failed; a checked file is damaged
constexpr int kExitBadInput = 2;  // bad input: nothing already written was touched
constexpr int kExitIoError = 3;   // the system failed to read or write a file

// The path an output file is written at. A symlink is followed to its target (so the link
// stays a link and the result lands where it points; a link to a file still to be made, in a
// folder that exists, too); a dangling link into a missing folder, a FIFO, a socket, a device
// or a directory is bad input (InvalidArgument), refused before anything is opened. A path
// that does not exist yet is returned unchanged.
std::string resolve_output_path(const std::string& path, const std::string& what);
// An input file must exist and be a regular file (after symlinks): never a FIFO, which
// would block the open forever. InvalidArgument otherwise.
void require_regular_file(const std::string& path, const std::string& what);

// A failure to open or create a path: a bad path (missing directory, no permission, a name
// that exists) is the user's input (h5::Error, exit code 2); any other errno is the system
// failing (IoError, exit code 3).
[[noreturn]] void throw_path_error(const std::string& what, int err);

// Writes all of [p, p + n) at `off` (pwrite, EINTR retried); IoError naming `what`.
void write_all(int fd, const void* p, size_t n, off_t off, const std::string& what);
// Reads up to n bytes at `off`; returns the count read (short at end of file); IoError.
size_t read_up_to(int fd, void* p, size_t n, off_t off, const std::string& what);
// fsync of fd / of the directory holding `path` (no-op when !enabled); IoError.
void sync_fd(int fd, bool enabled, const std::string& what);
void sync_dir_of(const std::string& path, bool enabled);
std::string dir_of(const std::string& path);

// POSIX open-file-description write lock on the whole file (F_OFD_SETLK): excludes a second
// kvlab writer, also one in the same process; independent of the flock() locks HDF5 readers
// take. False when another description holds it.
bool try_write_lock(int fd);
// Opens `path` read-write and takes its write lock, following the name to a new inode when
// an atomic replace moved it meanwhile. Throws h5::Error "is being written by another kvlab
// process" when locked (exit code 2: the user's request collides with a running writer),
// IoError when it cannot be opened.
int open_locked(const std::string& path, const std::string& why);

// CRC-32 (zlib: IEEE 802.3 polynomial, reflected, initial value 0, final xor): the checksum
// of every seal and integrity rule of result files; Python's zlib.crc32 gives the same.
uint32_t crc32_of(const void* p, size_t n, uint32_t crc = 0);

// Text safe to store as an HDF5 UTF-8 string: valid UTF-8 passes unchanged; every byte of
// an invalid sequence, and NUL (which would end an HDF5 string early), becomes the four
// characters "\xHH", so readers never fail to decode and what is stored is all of it.
std::string utf8_safe(const std::string& s);
// The byte offset of the first invalid UTF-8 sequence, or -1 when `s` is valid UTF-8.
int64_t first_invalid_utf8(const std::string& s);

}  // namespace kvlab::exp
