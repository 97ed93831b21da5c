// test_driver_spec.cpp: sweep configs: value lists and ranges, constraint expressions,
// expansion (cartesian, zips, constraints, overrides) and their error messages.
#include <gtest/gtest.h>

#include <string>

#include "experiments/cli/registry.h"
#include "experiments/results/identity.h"
#include "experiments/sweep/expr.h"
#include "experiments/sweep/spec.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"

using namespace kvlab::exp;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kvlab::InvalidArgument& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(DriverSpec, ValueListsAndRanges) {
  EXPECT_EQ(parse_value_list("1, 16 ,64", "a"), (std::vector<std::string>{"1", "16", "64"}));
  EXPECT_EQ(parse_value_list("pow2:9:11", "a"), (std::vector<std::string>{"512", "1024", "2048"}));
  EXPECT_EQ(parse_value_list("range:1:8:3", "a"), (std::vector<std::string>{"1", "4", "7"}));
  EXPECT_EQ(parse_value_list("range:5:5", "a"), (std::vector<std::string>{"5"}));
  EXPECT_EQ(parse_value_list("geom:4:128:4", "a"), (std::vector<std::string>{"4", "16", "64"}));
  EXPECT_EQ(parse_value_list("1,pow2:2:3,100", "a"),
            (std::vector<std::string>{"1", "4", "8", "100"}));
  EXPECT_NE(error_of([] { parse_value_list("pow2:9", "ctx"); }).find("malformed range 'pow2:9'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("pow2:a:3", "ctx"); }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("range:9:3", "ctx"); }).find("empty range"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("range:1:3:0", "ctx"); }).find("STEP must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("lin:1:3", "ctx"); }).find("unknown range kind 'lin'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("1,,2", "ctx"); }).find("empty item"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("  ", "ctx"); }).find("empty value list"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_value_list("pow2:0:63", "ctx"); }).find("HI <= 62"),
            std::string::npos);
}

TEST(DriverSpec, Expressions) {
  auto lookup = [](const std::string& n) -> ExprValue {
    if (n == "a") return 4.0;
    if (n == "b") return 6.0;
    if (n == "f") return std::string("e4m3");
    throw kvlab::InvalidArgument("unknown " + n);
  };
  EXPECT_TRUE(Expr::parse("a < b").eval(lookup));
  EXPECT_TRUE(Expr::parse("a * 2 - 2 == b").eval(lookup));
  EXPECT_TRUE(Expr::parse("b % a == 2 and not (f == 'e5m2')").eval(lookup));
  EXPECT_FALSE(Expr::parse("a >= b || f != \"e4m3\"").eval(lookup));
  EXPECT_TRUE(Expr::parse("-a < 0 && (a + b) / 2 == 5").eval(lookup));
  EXPECT_TRUE(Expr::parse("!(a > b)").eval(lookup));
  // `and` needs both sides, `or` either, and `and` binds tighter than `or`.
  EXPECT_FALSE(Expr::parse("a < b and f == 'e5m2'").eval(lookup));
  EXPECT_FALSE(Expr::parse("a > b && a < b").eval(lookup));
  EXPECT_TRUE(Expr::parse("a > b or a < b").eval(lookup));
  EXPECT_TRUE(Expr::parse("a < b or a > b and f == 'e5m2'").eval(lookup));
  EXPECT_FALSE(Expr::parse("(a < b or a > b) and f == 'e5m2'").eval(lookup));
  EXPECT_EQ(Expr::parse("a < b and f == 'x'").identifiers(),
            (std::vector<std::string>{"a", "b", "f"}));
  EXPECT_NE(error_of([] { Expr::parse("a <"); }).find("unexpected end"), std::string::npos);
  EXPECT_NE(error_of([] { Expr::parse("(a < b"); }).find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of([] { Expr::parse("a < b c"); }).find("unexpected 'c'"), std::string::npos);
  EXPECT_NE(error_of([&] { Expr::parse("f < a").eval(lookup); }).find("compares text with a number"),
            std::string::npos);
  // == between text and a number is a mistake too, never a silently false constraint.
  EXPECT_NE(error_of([&] { Expr::parse("f == 3").eval(lookup); }).find("compares text"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Expr::parse("a / (b - 6)").eval(lookup); }).find("division by zero"),
            std::string::npos);
}

TEST(DriverSpec, ExpandCartesianZipConstraint) {
  SweepSpec s = parse_sweep(
      "seed = 5\n[f]\nkind = format_error\nformat = fp8_e4m3,fp4_e2m1\ntokens = 8,16,32\nhead_dim "
      "= "
      "16,32,64\n"
      "zip = tokens, head_dim\nwhere = format == 'fp8_e4m3' or tokens < 32\n",
      "test");
  EXPECT_EQ(s.seed, 5u);
  const auto pts = expand(s, registered_kinds());
  ASSERT_EQ(pts.size(), 5u);  // 2 formats x 3 zipped pairs, minus (fp4_e2m1, 32)
  EXPECT_EQ(pts[0].str("format"), "fp8_e4m3");
  EXPECT_EQ(pts[0].integer("tokens"), 8);
  EXPECT_EQ(pts[0].integer("head_dim"), 16);
  EXPECT_EQ(pts[2].integer("tokens"), 32);
  EXPECT_EQ(pts[2].integer("head_dim"), 64);
  EXPECT_EQ(pts[4].str("format"), "fp4_e2m1");
  EXPECT_EQ(pts[4].integer("tokens"), 16);
  for (size_t i = 0; i < pts.size(); ++i) EXPECT_EQ(pts[i].index, static_cast<int64_t>(i));
  EXPECT_EQ(pts[0].str("dist"), "gaussian");  // the bench's default
  EXPECT_EQ(pts[0].key(),
            "f/"
            "format_error:format=fp8_e4m3,scaling=amax,saturation=satfinite,dist=gaussian,tokens=8,"
            "head_dim=16,seed=0");
  EXPECT_EQ(fingerprint(pts), fingerprint(expand(s, registered_kinds())));
}

TEST(DriverSpec, OverridesAndSelection) {
  SweepSpec s = parse_sweep(
      "[a]\nkind = format_error\nformat = e4m3\n[b]\nkind = quant_error\nscheme = mxfp4\n", "t");
  s.overrides = {"tokens=4,8"};  // both kinds have tokens
  auto pts = expand(s, registered_kinds());
  EXPECT_EQ(pts.size(), 4u);
  s.overrides = {"a.format=all"};
  EXPECT_EQ(expand(s, registered_kinds()).size(), 5u + 1u);
  s.overrides = {"nope=1"};
  EXPECT_NE(error_of([&] { expand(s, registered_kinds()); }).find("unknown axis 'nope'"),
            std::string::npos);
  s.overrides = {"c.tokens=1"};
  EXPECT_NE(error_of([&] { expand(s, registered_kinds()); }).find("unknown study 'c'"),
            std::string::npos);
  s.overrides = {};
  select_studies(&s, "b");
  ASSERT_EQ(s.studies.size(), 1u);
  EXPECT_NE(error_of([&] { select_studies(&s, "zz"); }).find("unknown study 'zz'"),
            std::string::npos);
}

TEST(DriverSpec, ConfigErrorsNameTheProblem) {
  auto err = [](const std::string& text) {
    return error_of([&] { expand(parse_sweep(text, "cfg.ini"), registered_kinds()); });
  };
  EXPECT_NE(err("[a]\nkind = format_error\nnot a key value line\n").find("malformed config"),
            std::string::npos);
  EXPECT_NE(err("bogus = 1\n[a]\nkind = format_error\n").find("unknown top-level key 'bogus'"),
            std::string::npos);
  EXPECT_NE(err("[a]\nformat = e4m3\n").find("has no 'kind'"), std::string::npos);
  EXPECT_NE(err("[a]\nkind = nope\n").find("unknown kind 'nope'"), std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\nwidth = 3\n")
                .find("unknown axis 'width' for kind format_error"),
            std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\nformat = e9m9\n").find("unknown value 'e9m9'"),
            std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\ntokens = 1.5\n").find("not an integer"),
            std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\ntokens = 1,1\n").find("listed twice"),
            std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\ntokens = 1,2\nhead_dim = 4\nzip = tokens, head_dim\n")
                .find("different lengths"),
            std::string::npos);
  EXPECT_NE(err("[a]\nkind = format_error\nwhere = width > 2\n").find("unknown axis 'width'"),
            std::string::npos);
  EXPECT_NE(err("[timing]\nmax_reps = 2\n[a]\nkind = format_error\n").find("max_reps"),
            std::string::npos);
  EXPECT_NE(err("[timing]\nspeed = 2\n[a]\nkind = format_error\n")
                .find("unknown key 'speed' in [timing]"),
            std::string::npos);
  EXPECT_NE(err("[timing]\nhold_stream = maybe\n[a]\nkind = format_error\n").find("hold_stream"),
            std::string::npos);
  // The stream hold is on unless a config turns it off, and it is part of the timing rules
  // that a resumed file must share (a file timed unheld is not continued held).
  EXPECT_TRUE(parse_sweep("[a]\nkind = format_error\n", "cfg.ini").timing.hold_stream);
  const SweepSpec off = parse_sweep("[timing]\nhold_stream = off\n[a]\nkind = format_error\n", "cfg.ini");
  EXPECT_FALSE(off.timing.hold_stream);
  EXPECT_NE(timing_rules_text(off.timing).find("hold_stream=0"), std::string::npos);
  EXPECT_NE(timing_rules_text(SweepSpec{}.timing).find("hold_stream=1"), std::string::npos);
  EXPECT_NE(err("name = x\n").find("no study sections"), std::string::npos);
  EXPECT_NE(error_of([] { load_sweep("/nonexistent/sweep.ini"); }).find("cannot read sweep config"),
            std::string::npos);
}

TEST(DriverSpec, EveryBenchDeclaresConsistentAxes) {
  for (const auto& b : benches()) {
    std::set<std::string> names;
    for (const auto& a : b->axes()) {
      EXPECT_TRUE(names.insert(a.name).second) << b->name() << " repeats axis " << a.name;
      if (a.type == AxisType::kEnum)
        EXPECT_NE(std::find(a.choices.begin(), a.choices.end(), a.default_value), a.choices.end())
            << b->name() << "." << a.name << " default is not a choice";
    }
    for (const auto& m : b->metrics())
      EXPECT_FALSE(names.count(m.name)) << b->name() << ": metric " << m.name << " is also an axis";
    // Default points expand and describe themselves.
    SweepSpec s = parse_sweep("[x]\nkind = " + b->name() + "\n", "t");
    EXPECT_EQ(expand(s, registered_kinds()).size(), 1u) << b->name();
  }
}
