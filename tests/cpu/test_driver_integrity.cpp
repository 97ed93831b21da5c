// test_driver_integrity.cpp: results that cannot be silently wrong: the in-place commit and
// its journal (experiments/h5/durable.h), checksums and identity (experiments/results), the
// one axis rule of every kind (experiments/sweep/axis_rule.h), the `where` parser's limits and
// the per-kind ETA (experiments/run/progress.h).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "experiments/cli/registry.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/file_io.h"
#include "experiments/h5/h5.h"
#include "experiments/results/identity.h"
#include "experiments/results/integrity.h"
#include "experiments/results/result_file.h"
#include "experiments/run/progress.h"
#include "experiments/sweep/axis_rule.h"
#include "experiments/sweep/expr.h"
#include "experiments/sweep/spec.h"
#include "tests/common/test_env.h"

namespace h5 = kvlab::exp::h5;
namespace fs = std::filesystem;
using namespace kvlab::exp;

namespace {

class TempDir {
 public:
  TempDir() {
    dir_ = fs::temp_directory_path() /
           ("kvlab_integrity_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

std::vector<unsigned char> bytes_of(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>());
}

void grow(h5::DurableFile& d, int from, int n, uint64_t seed, size_t values = 2000) {
  std::mt19937_64 rng(seed + static_cast<uint64_t>(from));
  std::normal_distribution<double> nd;
  for (int i = from; i < from + n; ++i) {
    h5::Group g = d.file().create_group("p" + std::to_string(i));
    std::vector<double> v(values);
    for (auto& x : v) x = nd(rng);
    g.write("trace", v);
    g.set_attr("i", int64_t{i});
    d.commit();
  }
}

const h5::DurableFile::Options kJournal{false, h5::DurableFile::Commit::kJournal};

}  // namespace

// A commit writes the pages it changes (twice: journal and file), not the file: on a file of
// some megabytes, appending one small group costs a few dozen KiB.
TEST(DriverIntegrity, InPlaceCommitCostsThePagesItChanges) {
  TempDir t;
  const std::string p = t.file("grow.h5");
  const uint64_t seed = kvlab::test::seed_for("integrity.grow");
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto d = h5::DurableFile::create(p, kJournal);
  grow(*d, 0, 40, seed, 20000);  // ~40 x 160 KB of traces
  const uint64_t size = d->committed_bytes();
  ASSERT_GT(size, 4u << 20);
  const auto before = d->stats();
  grow(*d, 40, 1, seed, 100);  // one small group
  const uint64_t wrote = (d->stats().data_bytes - before.data_bytes) +
                         (d->stats().journal_bytes - before.journal_bytes);
  EXPECT_LT(wrote, 96u << 10) << "a small commit on a " << size << "-byte file wrote " << wrote;
  EXPECT_GT(wrote, 0u);
  d.reset();
  EXPECT_EQ(h5::File::open(p).children().size(), 41u);
}

// A reader that holds the file open (HDF5 takes a shared flock) makes the commit an atomic
// replace: the reader keeps its snapshot, the writer goes on.
TEST(DriverIntegrity, AReaderHoldingTheFileGetsASnapshot) {
  TempDir t;
  const std::string p = t.file("snap.h5");
  auto d = h5::DurableFile::create(p, {false});
  grow(*d, 0, 2, 1);
  {
    const h5::File reader = h5::File::open(p);
    grow(*d, 2, 2, 1);
    EXPECT_EQ(reader.children().size(), 2u);
    // The first commit replaced the inode the reader holds; nobody holds the new one.
    EXPECT_EQ(d->stats().replaced, 1u);
  }
  grow(*d, 4, 1, 1);
  EXPECT_EQ(d->stats().replaced, 1u);
  d.reset();
  EXPECT_EQ(h5::File::open(p).children().size(), 5u);
}

// While pages change in place the HDF5 signature is poisoned: a file a kill left
// half-written is refused by every HDF5 reader ("not an HDF5 file"), never misread; recovery
// restores the last commit byte for byte.
TEST(DriverIntegrity, AKilledInPlaceCommitIsRefusedNotMisread) {
  TempDir t;
  const std::string p = t.file("kill.h5");
  for (long crash_after : {0L, 1L, 3L}) {
    fs::remove(p);
    std::vector<unsigned char> before;
    {
      auto d = h5::DurableFile::create(p, kJournal);
      grow(*d, 0, 3, 7);
      before = bytes_of(p);
      d->file().open_group("p0").set_attr("i", int64_t{100});
      d->file().create_group("p3").write("trace", std::vector<double>(5000, 1.0));
      d->set_crash_after_page_writes_for_test(crash_after);
      EXPECT_THROW(d->commit(), h5::Error);
      EXPECT_THROW(d->commit(), IoError);  // a writer whose commit failed must stop
    }
    const auto torn = bytes_of(p);
    ASSERT_GE(torn.size(), 8u);
    EXPECT_EQ(std::string(torn.begin(), torn.begin() + 8), "KVLABTRN") << "crash " << crash_after;
    EXPECT_FALSE(h5::File::is_hdf5(p));
    EXPECT_TRUE(h5::DurableFile::needs_recovery(p));
    EXPECT_EQ(h5::DurableFile::recover(p), h5::Recovery::kRolledBack);
    EXPECT_EQ(bytes_of(p), before);
    EXPECT_EQ(h5::File::open(p).open_group("p0").attr_int("i"), 0);
  }
}

// The journal belongs to one file: next to a file that replaced it (another inode) it is
// removed unapplied; against bytes it does not describe it is refused and kept.
TEST(DriverIntegrity, AJournalIsNeverAppliedToAnotherFile) {
  TempDir t;
  const std::string p = t.file("j.h5");
  auto crash = [&]() {
    fs::remove(p);
    auto d = h5::DurableFile::create(p, kJournal);
    grow(*d, 0, 3, 3);
    const auto good = bytes_of(p);
    d->file().open_group("p1").set_attr("i", int64_t{7});
    d->set_crash_after_page_writes_for_test(0);
    EXPECT_THROW(d->commit(), h5::Error);
    return good;
  };
  // Replaced by a copy of the last commit under the same name: another inode.
  const auto good = crash();
  const std::string other = t.file("other.h5");
  {
    std::ofstream o(other, std::ios::binary);
    o.write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(good.size()));
  }
  fs::rename(other, p);
  EXPECT_EQ(h5::DurableFile::recover(p), h5::Recovery::kRemovedStaleJournal);
  EXPECT_EQ(bytes_of(p), good);
  EXPECT_FALSE(fs::exists(h5::DurableFile::journal_path(p)));

  // Same inode, but its journaled bytes were overwritten by something else.
  crash();
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("\x89HDF\r\n\x1a\nGARBAGE-GARBAGE", 22);
  }
  const auto tampered = bytes_of(p);
  try {
    h5::DurableFile::recover(p);
    ADD_FAILURE() << "a journal that matches nothing was applied";
  } catch (const h5::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(bytes_of(p), tampered);
  EXPECT_TRUE(fs::exists(h5::DurableFile::journal_path(p)));

  // A journal of the previous format records no owner: reported, never applied.
  fs::remove(h5::DurableFile::journal_path(p));
  std::vector<unsigned char> j = {'K', 'V', 'L', 'A', 'B', 'R', 'B', '1', 0, 0, 0, 0};
  const uint32_t c = crc32_of(j.data(), j.size());
  for (int i = 0; i < 4; ++i) j.push_back(static_cast<unsigned char>(c >> (8 * i)));
  std::ofstream(h5::DurableFile::journal_path(p), std::ios::binary)
      .write(reinterpret_cast<const char*>(j.data()), static_cast<std::streamsize>(j.size()));
  EXPECT_THROW(h5::DurableFile::recover(p), h5::Error);
}

// A commit the system refuses half-way (here: a file size limit, as `ulimit -f` or a full
// disk do) is undone at once: the file is the last commit, no journal is left, IoError.
TEST(DriverIntegrity, AFailedCommitUndoesItselfAndReportsAnIoError) {
  TempDir t;
  const std::string p = t.file("full.h5");
  auto d = h5::DurableFile::create(p, kJournal);
  grow(*d, 0, 3, 5);
  const auto before = bytes_of(p);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit lim = old;
  lim.rlim_cur = before.size() + 4096;  // the journal fits, the grown file does not
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::mt19937_64 rng(9);
  std::vector<double> big(200000);
  for (auto& x : big) x = std::normal_distribution<double>()(rng);  // incompressible
  d->file().create_group("big").write("trace", big);
  bool threw = false;
  try {
    d->commit();
  } catch (const IoError& e) {
    threw = true;
    EXPECT_EQ(e.error_number(), EFBIG) << e.what();
    EXPECT_NE(std::string(e.what()).find("undone"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(bytes_of(p), before);
  EXPECT_FALSE(fs::exists(h5::DurableFile::journal_path(p)));
  EXPECT_FALSE(fs::exists(h5::DurableFile::temp_path(p)));
}

// The row rule: order-free, blind to columns that other kinds add (fill values), sensitive to
// every real cell.
TEST(DriverIntegrity, RowChecksumsSeeEveryCellButNotFill) {
  using Row = std::vector<std::pair<std::string, h5::Value>>;
  const Row a = {{"key", std::string("s/k:x=1")}, {"x", 1.0}, {"point", int64_t{3}}};
  const Row b = {{"point", int64_t{3}},
                 {"extra", std::numeric_limits<double>::quiet_NaN()},
                 {"label", std::string()},
                 {"x", 1.0},
                 {"group", std::string("/points/000009")},
                 {"key", std::string("s/k:x=1")}};
  EXPECT_EQ(row_checksum(a), row_checksum(b));
  Row c = a;
  c[1].second = std::nextafter(1.0, 2.0);
  EXPECT_NE(row_checksum(a), row_checksum(c));
  Row d = a;
  d[2].second = 3.0;  // the same number as a float: the same checksum (merge may widen)
  EXPECT_EQ(row_checksum(a), row_checksum(d));
  Row e = a;
  e.emplace_back("x_nan", -std::numeric_limits<double>::quiet_NaN());  // a computed NaN counts
  EXPECT_NE(row_checksum(a), row_checksum(e));
}

// A result file written by ResultFile verifies; a changed index cell, trace value or root
// attribute is found and named.
TEST(DriverIntegrity, CheckFindsChangedCellsTracesAndAttributes) {
  TempDir t;
  const std::string p = t.file("r.h5");
  const SweepSpec spec = parse_sweep(
      "seed = 4\n[f]\nkind = format_error\nformat = e4m3,e2m1\ntokens = 16\nhead_dim = 32\n", "t");
  const std::vector<Point> all = expand(spec, registered_kinds());
  RunMeta meta;
  meta.identity = make_identity(spec, all, true, registered_kinds());
  {
    h5::DurableFile::Options o;
    o.fsync = false;
    auto rf = ResultFile::create(p, meta, o);
    rf->declare({&find_bench("format_error")});
    rf->begin_run(meta, false);
    RunContext ctx;
    for (const auto& pt : all) {
      Record r = find_bench("format_error").run(pt, ctx);
      rf->write_point(pt, find_bench("format_error"), r);
    }
    rf->end_run(2, 0);
  }
  {
    const h5::File f = h5::File::open(p);
    const FileCheck c = check_result_file(f, p);
    EXPECT_TRUE(c.ok()) << (c.verification.problems.empty() ? "" : c.verification.problems[0]);
    EXPECT_EQ(c.rows, 2);
    ASSERT_TRUE(c.identity);
    EXPECT_EQ(c.identity->digest(), meta.identity.digest());
  }
  auto damaged_by = [&](const std::function<void(h5::File&)>& change) {
    const std::string q = t.file("changed.h5");
    fs::copy_file(p, q, fs::copy_options::overwrite_existing);
    {
      h5::File f = h5::File::open(q, true);
      change(f);
    }
    const h5::File f = h5::File::open(q);
    const FileCheck c = check_result_file(f, q);
    return c.verification.problems.empty() ? std::string() : c.verification.problems.front();
  };
  EXPECT_NE(damaged_by([](h5::File& f) {
              h5::Table(h5::Table::open(f, "index")).set(1, "rel_l2_mean", 0.5);
            }).find("/index row 1"),
            std::string::npos);
  EXPECT_NE(damaged_by([](h5::File& f) {
              f.open_group("points/000000").open_dataset("rel_l2_per_token").write_at(3, 9.0);
            }).find("/points/000000"),
            std::string::npos);
  EXPECT_NE(damaged_by([](h5::File& f) { f.set_attr("config_text", "edited"); })
                .find("root attributes"),
            std::string::npos);
  EXPECT_NE(damaged_by([](h5::File& f) { f.open_group("sweep").set_attr("seed", int64_t{5}); })
                .find("/sweep"),
            std::string::npos);
}

TEST(DriverIntegrity, IdentityDifferencesAreSpelledOut) {
  const SweepSpec a = parse_sweep("seed = 1\n[f]\nkind = format_error\ntokens = 16,32\n", "a");
  SweepSpec b = parse_sweep("seed = 2\n[f]\nkind = format_error\ntokens = 16,64\n", "b");
  const SweepIdentity ia = make_identity(a, expand(a, registered_kinds()), true, registered_kinds());
  const SweepIdentity ib = make_identity(b, expand(b, registered_kinds()), false, registered_kinds());
  EXPECT_EQ(identity_difference(ia, ia, "x", "y"), "");
  const std::string d = identity_difference(ia, ib, "file.h5", "this run");
  EXPECT_NE(d.find("seed: file.h5 has 1, this run has 2"), std::string::npos) << d;
  EXPECT_NE(d.find("timing rules"), std::string::npos) << d;
  EXPECT_NE(d.find("only in file.h5"), std::string::npos) << d;
  EXPECT_NE(d.find("tokens=32"), std::string::npos) << d;
  EXPECT_NE(d.find("tokens=64"), std::string::npos) << d;
  EXPECT_NE(ia.digest(), ib.digest());
}

// Every axis of every kind: its default passes its own rule, and the values a user may give
// by mistake (0, -1, 2^32 + 16, NaN, empty) are either accepted exactly as given (the rule
// allows them: 0 and -1 where they mean something) or refused with the axis and the value named.
TEST(DriverIntegrity, EveryAxisOfEveryKindHasOneRule) {
  int refused = 0, accepted = 0;
  for (const auto& b : benches()) {
    for (const auto& a : b->axes()) {
      const std::string what = b->name() + " axis " + a.name;
      if (!(a.type == AxisType::kEnum && a.default_value == "all"))
        EXPECT_NO_THROW(canonical_axis_value(a, a.default_value, what)) << what;
      for (const std::string v : {"0", "-1", "4294967312", "NaN", "", "9223372036854775808"}) {
        try {
          const std::string c = canonical_axis_value(a, v, what);
          ++accepted;
          EXPECT_EQ(c, v) << what << ": '" << v << "' accepted as '" << c << "'";
          EXPECT_NE(v, "") << what;
          if (a.numeric()) {  // a name axis may accept any word; its kind checks the point
            EXPECT_NE(v, "NaN") << what;
            EXPECT_NE(v, "9223372036854775808") << what;
          }
        } catch (const kvlab::InvalidArgument& e) {
          ++refused;
          const std::string m = e.what();
          EXPECT_NE(m.find(what), std::string::npos) << m;
          EXPECT_TRUE(m.find("'" + v + "'") != std::string::npos) << m;
        }
      }
    }
  }
  EXPECT_GT(refused, 300);
  EXPECT_GT(accepted, 10);
}

TEST(DriverIntegrity, IntegersAre64BitWithRanges) {
  AxisSpec a{"block_size", AxisType::kInt, "16"};
  a = a.range(1, 1 << 20);
  EXPECT_EQ(canonical_axis_value(a, "016", "x"), "16");
  for (const char* bad : {"4294967312", "-1", "0", "1.5", "16x", "9223372036854775808"})
    EXPECT_THROW(canonical_axis_value(a, bad, "x"), kvlab::InvalidArgument) << bad;
  AxisSpec s{"seed", AxisType::kInt, "0"};
  s = s.range(0, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(canonical_axis_value(s, "9223372036854775807", "x"), "9223372036854775807");
  AxisSpec g{"group", AxisType::kInt, "0"};
  g = g.range(0, 4096).powers_of_two();
  EXPECT_EQ(canonical_axis_value(g, "0", "x"), "0");
  EXPECT_EQ(canonical_axis_value(g, "64", "x"), "64");
  EXPECT_THROW(canonical_axis_value(g, "7", "x"), kvlab::InvalidArgument);
  AxisSpec u{"util", AxisType::kFloat, "0.9"};
  u = u.real_range(0, 1, true);
  EXPECT_THROW(canonical_axis_value(u, "0", "x"), kvlab::InvalidArgument);
  EXPECT_THROW(canonical_axis_value(u, "1.5", "x"), kvlab::InvalidArgument);
  EXPECT_THROW(canonical_axis_value(u, "inf", "x"), kvlab::InvalidArgument);
  EXPECT_EQ(canonical_axis_value(u, "1", "x"), "1");
}

// Hostile `where` lines end in an error, never a crash: 20k nested parentheses (which blew the
// stack before), a 5000-term chain, a 40 KB line.
TEST(DriverIntegrity, WhereParserHasLimits) {
  auto error_of = [](const std::string& text) {
    try {
      Expr::parse(text);
    } catch (const kvlab::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of(std::string(1000, '(') + "1" + std::string(1000, ')')).find("nesting deeper"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(1000, '-') + "1").find("nesting deeper"), std::string::npos);
  EXPECT_NE(error_of(std::string(1000, '!') + "1").find("nesting deeper"), std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 1000; ++i) chain += "+1";
  EXPECT_NE(error_of(chain).find("deeper than"), std::string::npos);
  EXPECT_NE(error_of(std::string(20000, '(') + "1" + std::string(20000, ')')).find("longer than"),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(50, '(') + "a < 2" + std::string(50, ')')), "<no error>");
  // A constraint that excludes every point is an error (an empty sweep), not "0 points".
  const SweepSpec s =
      parse_sweep("[f]\nkind = format_error\ntokens = 16,32\nwhere = tokens > 100\n", "t");
  try {
    expand(s, registered_kinds());
    ADD_FAILURE() << "an empty sweep was accepted";
  } catch (const kvlab::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no points"), std::string::npos) << e.what();
  }
}

// The ETA scales each kind's estimates by how that kind's finished points compared with
// theirs, and divides by the workers.
TEST(DriverIntegrity, EtaIsLearnedPerKind) {
  std::ostringstream sink;
  Progress p(Progress::Mode::kNone, sink, "", 1);
  for (int i = 0; i < 10; ++i) p.plan("slow_kind", 1.0);
  for (int i = 0; i < 10; ++i) p.plan("fast_kind", 1.0);
  EXPECT_DOUBLE_EQ(p.eta(), 20.0);  // nothing finished: the estimates as they are
  for (int i = 0; i < 2; ++i) p.finish_point("ok", "s", "", "slow_kind", 1.0, 4.0);
  for (int i = 0; i < 2; ++i) p.finish_point("ok", "f", "", "fast_kind", 1.0, 0.25);
  EXPECT_DOUBLE_EQ(p.eta(), 8 * 4.0 + 8 * 0.25);
  Progress w(Progress::Mode::kNone, sink, "", 2);
  for (int i = 0; i < 4; ++i) w.plan("k", 2.0);
  w.plan("other", 1.0);
  w.finish_point("ok", "k", "", "k", 2.0, 1.0);
  // k: 3 left x 2 s x (1 / 2); other (nothing finished): 1 s x the global ratio 0.5; / 2 workers
  EXPECT_DOUBLE_EQ(w.eta(), (3 * 2.0 * 0.5 + 1.0 * 0.5) / 2);
}

TEST(DriverIntegrity, StringsAreStoredAsValidUtf8) {
  EXPECT_EQ(first_invalid_utf8("h\xc3\xa9llo"), -1);
  EXPECT_EQ(first_invalid_utf8("ab\xff"), 2);
  EXPECT_EQ(utf8_safe("ab\xff\xc3"), "ab\\xFF\\xC3");
  EXPECT_EQ(utf8_safe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(utf8_safe(utf8_safe("x\xfe")), utf8_safe("x\xfe"));
  try {
    parse_sweep("name = n\xff\n[f]\nkind = format_error\n", "bad.ini");
    ADD_FAILURE() << "non-UTF-8 config accepted";
  } catch (const kvlab::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
}
