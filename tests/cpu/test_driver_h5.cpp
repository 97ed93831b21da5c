// test_driver_h5.cpp: the HDF5 RAII layer (experiments/h5/h5.h) and the crash-safe
// commit protocol (experiments/h5/durable.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "tests/common/test_env.h"

namespace h5 = kvlab::exp::h5;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    dir_ = fs::temp_directory_path() /
           ("kvlab_h5_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

}  // namespace

TEST(DriverH5, AttributesRoundTrip) {
  TempDir t;
  const std::string p = t.file("a.h5");
  {
    h5::File f = h5::File::create(p);
    f.set_attr("i", int64_t{-42});
    f.set_attr("d", 2.5);
    f.set_attr("s", std::string("héllo"));
    f.set_attr("list", std::vector<std::string>{"a", "", "ccc"});
    f.set_attr("v", std::vector<double>{1, 2, 3});
    f.set_attr("i", int64_t{7});  // overwrite
    h5::Group g = f.create_group("g");
    g.set_attr("flag", true);
  }
  h5::File f = h5::File::open(p);
  EXPECT_EQ(f.attr_int("i"), 7);
  EXPECT_DOUBLE_EQ(f.attr_double("d"), 2.5);
  EXPECT_DOUBLE_EQ(f.attr_double("i"), 7.0);
  EXPECT_EQ(f.attr_string("s"), "héllo");
  EXPECT_EQ(f.attr_strings("list"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.attr_doubles("v"), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(f.attr_type("s"), h5::Type::kString);
  EXPECT_TRUE(std::holds_alternative<int64_t>(f.attr("i")));
  EXPECT_EQ(f.open_group("g").attr_int("flag"), 1);
  EXPECT_FALSE(f.has_attr("nope"));
  EXPECT_THROW(f.attr_int("nope"), h5::Error);
  EXPECT_THROW(f.attr_int("s"), h5::Error);
  EXPECT_THROW(f.attr_string("d"), h5::Error);
}

TEST(DriverH5, DatasetsAndGroups) {
  TempDir t;
  const std::string p = t.file("d.h5");
  {
    h5::File f = h5::File::create(p);
    h5::Group g = f.create_group("a");
    h5::Group gg = g.create_group("b");
    gg.write("x", std::vector<double>{1.5, -2, NAN}, {3});
    gg.write("m", std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    gg.write("i", std::vector<int64_t>{1, -2, 1LL << 40});
    gg.write("u", std::vector<uint8_t>{0, 255});
    gg.write("s", std::vector<std::string>{"x", "yy"});
    EXPECT_THROW(gg.write("bad", std::vector<double>{1, 2, 3}, {2, 2}), h5::Error);
    h5::Dataset a = gg.create_appendable("grow", h5::Type::kInt32, 2);
    a.append(h5::ColumnData::of(std::vector<int64_t>{1, 2, 3}));
    a.append(h5::ColumnData::of(std::vector<int64_t>{4}));
    a.write_at(0, int64_t{9});
    EXPECT_THROW(a.write_at(4, int64_t{1}), h5::Error);
    EXPECT_THROW(a.append(h5::ColumnData::of(std::vector<std::string>{"s"})), h5::Error);
  }
  h5::File f = h5::File::open(p);
  EXPECT_TRUE(f.exists("a/b/x"));
  EXPECT_FALSE(f.exists("a/zz/x"));  // a missing intermediate link is "false", not an error
  EXPECT_TRUE(f.is_group("a/b"));
  EXPECT_TRUE(f.is_dataset("a/b/x"));
  h5::Group b = f.open_group("a/b");
  EXPECT_EQ(b.children(), (std::vector<std::string>{"grow", "i", "m", "s", "u", "x"}));
  auto x = b.open_dataset("x").read_doubles();
  EXPECT_EQ(x[0], 1.5);
  EXPECT_TRUE(std::isnan(x[2]));
  EXPECT_EQ(b.open_dataset("m").shape(), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(b.open_dataset("m").type(), h5::Type::kFloat32);
  EXPECT_EQ(b.open_dataset("i").read_ints()[2], 1LL << 40);
  EXPECT_EQ(b.open_dataset("u").type(), h5::Type::kUInt8);
  EXPECT_EQ(b.open_dataset("u").read_ints()[1], 255);
  EXPECT_EQ(b.open_dataset("s").read_strings()[1], "yy");
  EXPECT_EQ(b.open_dataset("grow").read_ints(), (std::vector<int64_t>{9, 2, 3, 4}));
  EXPECT_THROW(b.open_dataset("s").read_doubles(), h5::Error);
  EXPECT_THROW(f.open_group("nope"), h5::Error);
}

TEST(DriverH5, TableAppendAddColumnAndCopy) {
  TempDir t;
  const std::string p = t.file("t.h5");
  {
    h5::File f = h5::File::create(p);
    h5::Table tab = h5::Table::create(f, "index",
                                      {{"name", h5::Type::kString, "", "point name"},
                                       {"x", h5::Type::kFloat64, "s", ""},
                                       {"n", h5::Type::kInt64, "", ""}},
                                      2);
    tab.append_row({{"name", std::string("p0")}, {"x", 1.0}, {"n", int64_t{3}}});
    tab.append_row({{"name", std::string("p1")}, {"n", int64_t{4}}});  // x missing -> NaN
    tab.append({{"x", h5::ColumnData::of(std::vector<double>{5, 6, 7})}});
    EXPECT_THROW(tab.append_row({{"zz", 1.0}}), h5::Error);
    EXPECT_THROW(tab.append({{"x", h5::ColumnData::of(std::vector<double>{1})},
                             {"n", h5::ColumnData::of(std::vector<int64_t>{1, 2})}}),
                 h5::Error);
    tab.add_column({"late", h5::Type::kString, "", ""});
    tab.set(4, "late", std::string("z"));
    tab.set(0, "x", int64_t{2});  // int into a float column: widened
    EXPECT_THROW(tab.set(9, "x", 1.0), h5::Error);
    h5::Group dst = f.create_group("copy");
    f.copy("index", dst, "index2");
  }
  h5::File f = h5::File::open(p);
  for (const char* name : {"index", "copy/index2"}) {
    h5::Table tab = h5::Table::open(f, name);
    ASSERT_EQ(tab.rows(), 5u);
    ASSERT_EQ(tab.columns().size(), 4u);
    EXPECT_EQ(tab.column("x").unit, "s");
    auto x = tab.read_doubles("x");
    EXPECT_EQ(x[0], 2);
    EXPECT_TRUE(std::isnan(x[1]));
    EXPECT_EQ(x[4], 7);
    EXPECT_EQ(tab.read_strings("name")[2], "");
    EXPECT_EQ(tab.read_strings("late")[4], "z");
    EXPECT_EQ(tab.read_ints("n")[1], 4);
  }
}

TEST(DriverH5, OpenErrorsAreClear) {
  TempDir t;
  const std::string p = t.file("not.h5");
  std::ofstream(p) << "this is not hdf5";
  EXPECT_FALSE(h5::File::is_hdf5(p));
  EXPECT_THROW(h5::File::open(p), h5::Error);
  try {
    h5::File::open(t.file("missing.h5"));
    FAIL() << "expected an error";
  } catch (const h5::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.h5"), std::string::npos) << e.what();
  }
  h5::File::create(t.file("x.h5"));
  EXPECT_THROW(h5::File::create(t.file("x.h5")), h5::Error);  // no silent overwrite
}

// Writes `n` groups with a dataset each, committing after each; returns the file sizes.
static void grow(h5::DurableFile& d, int from, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  for (int i = from; i < from + n; ++i) {
    h5::Group g = d.file().create_group("p" + std::to_string(i));
    std::vector<double> v(1000 + 37 * i);
    for (auto& x : v) x = nd(rng);
    g.write("trace", v);
    g.set_attr("i", int64_t{i});
    d.commit();
  }
}

TEST(DriverH5, DurableCommitsAreReadableByPlainHdf5) {
  TempDir t;
  const std::string p = t.file("dur.h5");
  const uint64_t seed = kvlab::test::seed_for("durable.grow");
  SCOPED_TRACE("seed " + std::to_string(seed));
  {
    auto d = h5::DurableFile::create(p, {false});
    grow(*d, 0, 5, seed);
    // Between commits the disk file is complete.
    h5::File f = h5::File::open(p);
    EXPECT_EQ(f.children().size(), 5u);
    // A second writer is refused while the first holds the file.
    EXPECT_THROW(h5::DurableFile::open(p), h5::Error);
    d->file().create_group("uncommitted");
  }
  EXPECT_FALSE(fs::exists(h5::DurableFile::journal_path(p)));
  h5::File f = h5::File::open(p);
  EXPECT_EQ(f.children().size(), 5u);  // the uncommitted group never reached the disk
  EXPECT_EQ(f.open_group("p4").attr_int("i"), 4);
}

TEST(DriverH5, InterruptedJournalCommitRollsBack) {
  TempDir t;
  const std::string p = t.file("crash.h5");
  // every commit in place through the rollback journal
  const h5::DurableFile::Options journal{false, h5::DurableFile::Commit::kJournal};
  const uint64_t seed = kvlab::test::seed_for("durable.crash");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<unsigned char> before;
  for (long crash_after : {0L, 1L, 2L}) {
    fs::remove(p);
    {
      auto d = h5::DurableFile::create(p, journal);
      grow(*d, 0, 3, seed);
      std::ifstream in(p, std::ios::binary);
      before.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      // Modify existing metadata too (attribute rewrite) so that old pages change.
      d->file().open_group("p0").set_attr("i", int64_t{100});
      d->file().create_group("p3").write("trace", std::vector<double>(5000, 1.0));
      d->set_crash_after_page_writes_for_test(crash_after);
      EXPECT_THROW(d->commit(), h5::Error);
    }
    ASSERT_TRUE(fs::exists(h5::DurableFile::journal_path(p))) << "crash_after " << crash_after;
    EXPECT_EQ(h5::DurableFile::recover(p), h5::Recovery::kRolledBack);
    std::ifstream in(p, std::ios::binary);
    std::vector<unsigned char> after((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    EXPECT_EQ(after, before) << "rollback must restore the last commit byte for byte";
    h5::File f = h5::File::open(p);
    EXPECT_EQ(f.children().size(), 3u);
    EXPECT_EQ(f.open_group("p0").attr_int("i"), 0);
    EXPECT_EQ(h5::DurableFile::recover(p), h5::Recovery::kNone);
  }
}

// Atomic replace (taken while a reader holds the file open): a commit killed while it
// writes the new image leaves the file byte for byte as the last commit made it, readable by
// plain HDF5 without any recovery; the next open removes the stale temporary and continues.
TEST(DriverH5, InterruptedAtomicCommitLeavesTheFileUntouched) {
  TempDir t;
  const std::string p = t.file("atomic.h5");
  const uint64_t seed = kvlab::test::seed_for("durable.atomic");
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (long crash_after_kib : {0L, 1L, 7L, 1000000L}) {
    fs::remove(p);
    std::vector<unsigned char> before;
    {
      auto d = h5::DurableFile::create(p, {false, h5::DurableFile::Commit::kReplace});
      grow(*d, 0, 3, seed);
      std::ifstream in(p, std::ios::binary);
      before.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      d->file().open_group("p0").set_attr("i", int64_t{100});
      d->file().create_group("p3").write("trace", std::vector<double>(5000, 1.0));
      d->set_crash_after_page_writes_for_test(crash_after_kib);
      EXPECT_THROW(d->commit(), h5::Error);
    }
    EXPECT_FALSE(fs::exists(h5::DurableFile::journal_path(p)));
    ASSERT_TRUE(fs::exists(h5::DurableFile::temp_path(p)))
        << "crash_after " << crash_after_kib << " KiB";
    std::ifstream in(p, std::ios::binary);
    std::vector<unsigned char> after((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    EXPECT_EQ(after, before) << "the file must be exactly the last commit";
    {
      h5::File f = h5::File::open(p);  // no recovery needed to read it
      EXPECT_EQ(f.children().size(), 3u);
      EXPECT_EQ(f.open_group("p0").attr_int("i"), 0);
    }
    h5::Recovery r;
    auto d = h5::DurableFile::open(p, {false}, &r);
    EXPECT_EQ(r, h5::Recovery::kRemovedStaleTemp);
    EXPECT_FALSE(fs::exists(h5::DurableFile::temp_path(p)));
    grow(*d, 3, 1, seed);
    d.reset();
    EXPECT_EQ(h5::File::open(p).children().size(), 4u);
  }
}

// Every commit replaces the file: a reader that opened an earlier version keeps reading a
// consistent snapshot, and the writer's lock follows the file to its new inode.
TEST(DriverH5, AtomicCommitsKeepReadersConsistentAndTheLock) {
  TempDir t;
  const std::string p = t.file("snap.h5");
  const uint64_t seed = kvlab::test::seed_for("durable.snapshot");
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto d = h5::DurableFile::create(p, {false});
  grow(*d, 0, 2, seed);
  h5::File old_reader = h5::File::open(p);
  grow(*d, 2, 3, seed);
  EXPECT_EQ(old_reader.children().size(), 2u);  // its snapshot, intact
  EXPECT_EQ(old_reader.open_group("p1").open_dataset("trace").size(), 1000u + 37u);
  EXPECT_EQ(h5::File::open(p).children().size(), 5u);
  try {
    h5::DurableFile::open(p, {false});
    ADD_FAILURE() << "a second writer was let in after a rename";
  } catch (const h5::Error& e) {
    EXPECT_NE(std::string(e.what()).find("being written by another kvlab process"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(h5::DurableFile::recover(p), h5::Recovery::kNone);  // nothing to undo: no lock needed
  // Something that looks undoable while the writer lives: recovery refuses to touch it.
  std::ofstream(h5::DurableFile::temp_path(p)) << "partial";
  EXPECT_THROW(h5::DurableFile::recover(p), h5::Error);
  EXPECT_TRUE(fs::exists(h5::DurableFile::temp_path(p)));
}

TEST(DriverH5, TornJournalIsDiscardedAndResumeContinues) {
  TempDir t;
  const std::string p = t.file("torn.h5");
  const uint64_t seed = kvlab::test::seed_for("durable.torn");
  SCOPED_TRACE("seed " + std::to_string(seed));
  {
    auto d = h5::DurableFile::create(p, {false});
    grow(*d, 0, 2, seed);
  }
  // A journal cut short (no valid seal) as if the writer died while writing it.
  std::ofstream(h5::DurableFile::journal_path(p), std::ios::binary) << "KVLABRB1\x10\x00\x00";
  h5::Recovery r;
  auto d = h5::DurableFile::open(p, {false}, &r);
  EXPECT_EQ(r, h5::Recovery::kDiscardedTorn);
  grow(*d, 2, 2, seed);
  d.reset();
  h5::File f = h5::File::open(p);
  EXPECT_EQ(f.children().size(), 4u);
}

TEST(DriverH5, DurableCreateRefusesExistingAndCorrupt) {
  TempDir t;
  const std::string p = t.file("exists.h5");
  std::ofstream(p) << "x";
  EXPECT_THROW(h5::DurableFile::create(p), h5::Error);
  EXPECT_THROW(h5::DurableFile::open(p), h5::Error);  // not HDF5
  std::ifstream in(p);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "x");  // nothing already written is lost
  EXPECT_THROW(h5::DurableFile::create(t.file("no/such/dir/x.h5")), h5::Error);
}
