// durable.h: an HDF5 file that is edited in memory and committed to disk crash-safely.
//
// Why: HDF5 updates metadata in place and may write it at any moment; a process killed
// mid-write (SIGKILL, OOM, Slurm time limit) can leave a file no reader can open. kvlab's
// result files must survive that with at most the point in flight lost.
//
// How (the classic rollback journal, as SQLite does it):
//   - the file lives in memory (HDF5 core driver, no backing store); the disk copy only
//     changes in commit();
//   - commit() flushes, takes the file image and diffs it against the last committed
//     bytes in 4 KiB pages. It writes the OLD contents of every page it will overwrite,
//     plus the old size, to `<path>.rollback` (length-framed, CRC32-sealed) and fsyncs it;
//     then it appends the new tail, rewrites the changed pages, truncates, fsyncs, and
//     deletes the journal;
//   - on open (and via recover()), a sealed journal means a commit was interrupted after
//     it may have touched the file: its pages are restored, giving the previous commit
//     exactly. A torn journal means the commit never touched the file: it is discarded.
// Between commits the on-disk file is a complete HDF5 file that h5py, pandas and h5dump
// read without kvlab. Only a kill inside the microseconds of a commit's page writes leaves
// a file that needs recover() (every kvlab command that opens a result does it).
//
// A writer holds a POSIX record lock on the file (fcntl; HDF5's own flock() locks are
// separate, so readers are never blocked): a second writer fails with a clear error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experiments/h5/h5.h"

namespace kvlab::exp::h5 {

enum class Recovery {
  kNone,          // no journal: the file is as the last commit left it
  kRolledBack,    // an interrupted commit was undone
  kDiscardedTorn  // a torn journal (the commit had not started) was removed
};
std::string to_string(Recovery r);

class DurableFile {
 public:
  struct Options {
    bool fsync = true;  // also survive power loss, not only process death
  };

  // Creates `path` (an error if it exists) holding an empty HDF5 file, committed at once.
  static std::unique_ptr<DurableFile> create(const std::string& path, Options opt);
  static std::unique_ptr<DurableFile> create(const std::string& path) { return create(path, Options()); }
  // Opens an existing file for writing; recovers an interrupted commit first.
  static std::unique_ptr<DurableFile> open(const std::string& path, Options opt, Recovery* recovery = nullptr);
  static std::unique_ptr<DurableFile> open(const std::string& path) { return open(path, Options()); }

  // Undoes an interrupted commit of `path` (no-op without a journal). Safe to call on any
  // file; needs write access only when there is a journal.
  static Recovery recover(const std::string& path);
  static std::string journal_path(const std::string& path) { return path + ".rollback"; }

  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  File& file() { return file_; }
  const std::string& path() const { return path_; }
  // Makes every change since the last commit durable, atomically. Returns bytes written.
  size_t commit();
  size_t committed_bytes() const { return committed_.size(); }

  // Test hook: the commit is abandoned (process-death style) after `n` page writes.
  void set_crash_after_page_writes_for_test(long n) { crash_after_writes_ = n; }

 private:
  DurableFile() = default;
  void lock_or_throw();

  std::string path_;
  Options opt_;
  File file_;
  int fd_ = -1;
  std::vector<unsigned char> committed_;
  long crash_after_writes_ = -1;
};

}  // namespace kvlab::exp::h5
