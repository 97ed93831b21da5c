// durable.h: an HDF5 file that is edited in memory and committed to disk crash-safely, at a
// cost proportional to what changed.
//
// Why: HDF5 updates metadata in place and may write it at any moment; a process killed
// mid-write (SIGKILL, OOM, Slurm time limit) can leave a file no reader can open. kvlab's
// result files must survive that with at most the point in flight lost, and appending a point
// must cost the pages the point changes, not the whole file (a sweep of 800 points into a
// 16 MB file used to write 9 GB by rewriting the file at every point).
//
// How. The file is opened through the overlay driver (overlay.h): reads come from the disk,
// every write since the last commit stays in memory, page by page. commit() flushes HDF5 into
// the overlay and moves the dirty pages to disk by one of two protocols:
//   - in place, through a rollback journal (SQLite's scheme; the default): the OLD contents of
//     every page the commit overwrites (and of the tail it truncates) are written to
//     `<path>.rollback`, sealed with a CRC-32 and fsynced; then the pages are written in place,
//     the file gets its new length, is fsynced, and the journal is deleted. Cost: the changed
//     pages twice (journal + data) plus the new tail. A commit killed after its journal was
//     sealed is undone on the next open (recover()): the file is then byte for byte the
//     previous commit; a journal without a valid seal means the file was never touched and is
//     discarded. While the pages are written the writer holds flock(LOCK_EX) on the file,
//     which is what HDF5 readers (h5py, h5dump) take shared when they open: a reader that
//     opens during those milliseconds gets "unable to lock file" and retries (HDF5 takes the
//     file's length before its shared lock, so an open that straddles a commit which grew the
//     file is refused as "truncated file", stored_eof past eof: a refusal, and the next open
//     sees the commit whole). And the file's
//     HDF5 signature is overwritten before the first page changes and restored by the last
//     write: a file a kill left half-written reads as "not an HDF5 file" to every reader until
//     recovery (every kvlab command that opens it, or `kvlab recover`), never as a torn file
//     that could be misread.
//   - atomic replace, when a reader holds the file open (the writer's LOCK_EX|LOCK_NB fails)
//     or when Options::protocol asks for it: the committed bytes plus the dirty pages are
//     written to `<path>.commit`, fsynced, and renamed over `path`. The reader keeps its
//     consistent snapshot (the old inode is never modified); the commit costs the whole file.
// Between commits the on-disk file is a complete HDF5 file in both protocols.
//
// The journal is tied to the file it belongs to: it records the file's device and inode and,
// for every 512-byte sector of the pages it covers, the old bytes and a CRC-32 of the new ones.
// Recovery rolls back only when the device and inode match and every sector holds either its
// old or its new bytes (which is what a kill or a power loss in the middle of the page writes
// leaves); a journal left next to a file that was since replaced by another is removed without
// being applied, and one that matches nothing is reported, not applied.
//
// A failed commit (disk full, quota, EIO, a file size limit) undoes itself at once: the pages
// already written are restored from the in-memory journal and the journal is removed, so the
// file is the previous commit; then IoError (exit code 3). The DurableFile is unusable after
// that (its in-memory state is ahead of the disk).
//
// A writer holds a POSIX record lock on the file (an OFD lock, file_io.h; HDF5's flock()
// locks are separate): a second writer fails with a clear error. The atomic replace locks the
// new inode before the rename, and a writer that opened the old inode notices (inode check)
// and retries, so exclusion survives renames. Temporaries (`<path>.commit`) are locked while
// they are written; one found unlocked is a leftover of a killed writer and is removed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/h5/file_io.h"
#include "experiments/h5/h5.h"

namespace kvlab::exp::h5 {

class Overlay;

enum class Recovery {
  kNone,                 // no journal: the file is as the last commit left it
  kRolledBack,           // an interrupted commit was undone
  kDiscardedTorn,        // a torn journal (the commit had not started) was removed
  kRemovedStaleTemp,     // the temporary of a killed writer was removed (the file was untouched)
  kRemovedStaleJournal,  // a journal of another file that had this name was removed, unapplied
};
std::string to_string(Recovery r);

class DurableFile {
 public:
  enum class Commit {
    kAuto,     // in place through the journal; atomic replace while a reader holds the file
    kJournal,  // always in place (tests)
    kReplace,  // always rewrite the whole file (the cost before the overlay: for comparisons)
  };
  struct Options {
    bool fsync = true;  // also survive power loss, not only process death
    Commit protocol = Commit::kAuto;
  };
  // What the commits of this DurableFile wrote.
  struct Stats {
    uint64_t commits = 0;
    uint64_t data_bytes = 0;     // pages and tails written to the file (or its replacement)
    uint64_t journal_bytes = 0;  // rollback journals written
    uint64_t replaced = 0;       // commits that rewrote the whole file (a reader held it)
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

  // Undoes an interrupted commit of `path` and removes leftovers of killed writers (no-op
  // when there is none). Needs write access only when there is something to undo, and then
  // refuses (h5::Error) while another process writes the file.
  static Recovery recover(const std::string& path);
  // True when `path` has a journal or a temporary next to it (recover() has work to do).
  static bool needs_recovery(const std::string& path);
  static std::string journal_path(const std::string& path) { return path + ".rollback"; }
  static std::string temp_path(const std::string& path) { return path + ".commit"; }

  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  File& file() { return file_; }
  const std::string& path() const { return path_; }
  // Makes every change since the last commit durable, atomically. Returns the bytes written
  // (data and journal). IoError when the system fails (the file is left as the last commit).
  size_t commit();
  uint64_t committed_bytes() const;  // the file's length after the last commit
  const Stats& stats() const { return stats_; }

  // Test hook: the next commit is abandoned (process-death style: no cleanup) after `n` page
  // writes (in place) / after writing the first n KiB of the temporary (atomic replace).
  void set_crash_after_page_writes_for_test(long n) { crash_after_writes_ = n; }

 private:
  DurableFile() = default;
  size_t commit_in_place(uint64_t new_size);
  size_t commit_by_replace(uint64_t new_size);
  static Recovery recover_locked(const std::string& path, int fd);

  std::string path_;
  Options opt_;
  std::shared_ptr<Overlay> overlay_;
  File file_;
  int fd_ = -1;
  bool broken_ = false;
  long crash_after_writes_ = -1;
  Stats stats_;
};

}  // namespace kvlab::exp::h5
