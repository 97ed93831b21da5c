// durable.h: an HDF5 file that is edited in memory and committed to disk crash-safely.
//
// Why: HDF5 updates metadata in place and may write it at any moment; a process killed
// mid-write (SIGKILL, OOM, Slurm time limit) can leave a file no reader can open. kvlab's
// result files must survive that with at most the point in flight lost.
//
// How. The file lives in memory (HDF5 core driver, no backing store); the disk copy only
// changes in commit(), which flushes and takes the whole file image. Two protocols:
//   - atomic replace (images up to Options::atomic_limit_bytes, 64 MiB by default: every
//     result file of the shipped sweeps): the image is written to `<path>.commit`, fsynced,
//     and renamed over `path` (then the directory is fsynced). rename() replaces the name
//     atomically, so at EVERY instant, a SIGKILL included, `path` names a complete file
//     of the last or the new commit: h5py, pandas and h5dump read it without kvlab. A reader
//     that opened the old file keeps a consistent snapshot (its inode is never modified).
//     A kill before the rename leaves only a stale `<path>.commit`, removed on the next open.
//   - rollback journal (larger images, where rewriting the whole file per commit would cost
//     too much), as SQLite does it: commit() diffs the image against the last committed
//     bytes in 4 KiB pages, writes the OLD contents of every page it will overwrite plus the
//     old size to `<path>.rollback` (length-framed, CRC32-sealed) and fsyncs it; then it
//     appends the new tail, rewrites the changed pages, truncates, fsyncs, and deletes the
//     journal. On open (and via recover()), a sealed journal means a commit was interrupted
//     after it may have touched the file: its pages are restored, giving the previous commit
//     exactly. A torn journal means the commit never touched the file: it is discarded. Here
//     a kill inside the microseconds of a commit's page writes leaves a file that needs
//     recover() (every kvlab command that opens a result does it) before h5py can read it.
// Between commits the on-disk file is a complete HDF5 file in both protocols.
//
// A writer holds a POSIX record lock on the file (fcntl OFD lock; HDF5's own flock() locks
// are separate, so readers are never blocked): a second writer fails with a clear error.
// The atomic replace moves the lock to the new inode before the rename, and a writer that
// opened the old inode notices (inode check) and retries, so exclusion survives renames.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/h5/h5.h"

namespace kvlab::exp::h5 {

enum class Recovery {
  kNone,             // no journal: the file is as the last commit left it
  kRolledBack,       // an interrupted commit was undone
  kDiscardedTorn,    // a torn journal (the commit had not started) was removed
  kRemovedStaleTemp  // an atomic commit killed before its rename left <path>.commit: removed
};
std::string to_string(Recovery r);

class DurableFile {
 public:
  static constexpr size_t kDefaultAtomicLimit = size_t{64} << 20;
  struct Options {
    bool fsync = true;  // also survive power loss, not only process death
    // Images up to this size are committed by atomic replace (readable at every instant);
    // larger ones through the rollback journal. 0 = always the journal (tests).
    size_t atomic_limit_bytes = kDefaultAtomicLimit;
  };

  // Creates `path` (an error if it exists), committed at once. `init` (optional) fills the
  // in-memory file first, so the first version readers can see is already complete.
  static std::unique_ptr<DurableFile> create(const std::string& path, Options opt,
                                             const std::function<void(File&)>& init = nullptr);
  static std::unique_ptr<DurableFile> create(const std::string& path) {
    return create(path, Options());
  }
  // Opens an existing file for writing; recovers an interrupted commit first.
  static std::unique_ptr<DurableFile> open(const std::string& path, Options opt,
                                           Recovery* recovery = nullptr);
  static std::unique_ptr<DurableFile> open(const std::string& path) {
    return open(path, Options());
  }

  // Undoes an interrupted commit of `path` (no-op without a journal or a stale temporary).
  // Safe to call on any file; needs write access only when there is something to undo, and
  // then refuses (h5::Error) while another process writes the file.
  static Recovery recover(const std::string& path);
  static std::string journal_path(const std::string& path) { return path + ".rollback"; }
  static std::string temp_path(const std::string& path) { return path + ".commit"; }

  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  File& file() { return file_; }
  const std::string& path() const { return path_; }
  // Makes every change since the last commit durable, atomically. Returns bytes written.
  size_t commit();
  size_t committed_bytes() const { return committed_.size(); }

  // Test hook: the commit is abandoned (process-death style) after `n` page writes
  // (journal protocol) / after writing the first n KiB of the temporary (atomic replace).
  void set_crash_after_page_writes_for_test(long n) { crash_after_writes_ = n; }

 private:
  DurableFile() = default;
  size_t commit_by_rename(const std::vector<unsigned char>& img);
  size_t commit_by_journal(const std::vector<unsigned char>& img);
  static Recovery recover_locked(const std::string& path);

  std::string path_;
  Options opt_;
  File file_;
  int fd_ = -1;
  std::vector<unsigned char> committed_;
  long crash_after_writes_ = -1;
};

}  // namespace kvlab::exp::h5
