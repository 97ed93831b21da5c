// expr.cpp: a small recursive-descent parser and evaluator for sweep constraints.
#include "experiments/sweep/expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "reference/core/error.h"

namespace kvlab::exp {

struct Expr::Node {
  enum Op {
    kNum,
    kStr,
    kIdent,
    kNeg,
    kNot,
    kAnd,
    kOr,
    kAdd,
    kSub,
    kMul,
    kDiv,
    kMod,
    kLt,
    kLe,
    kGt,
    kGe,
    kEq,
    kNe
  };
  Op op = kNum;
  int depth = 1;
  double num = 0;
  std::string str;
  std::shared_ptr<const Node> a, b;
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;
using N = Expr::Node;

// Limits that keep parsing and evaluation (both recursive) far from the stack's end, for any
// input: a `where` line is a human-written constraint, never thousands of levels deep.
constexpr size_t kMaxLength = 4096;  // characters of one expression
constexpr int kMaxDepth = 64;        // nesting of parentheses and prefix operators
constexpr int kMaxTreeDepth = 256;   // depth of the expression tree (long chains of + or and)

int depth_of(const NodeP& n) {
  return n ? n->depth : 0;
}

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}

  NodeP parse() {
    if (t_.size() > kMaxLength)
      throw InvalidArgument("constraint of " + std::to_string(t_.size()) +
                            " characters: longer than the limit of " +
                            std::to_string(kMaxLength));
    NodeP n = parse_or();
    skip();
    if (i_ != t_.size()) fail("unexpected '" + t_.substr(i_, 1) + "'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    const std::string shown = t_.size() > 80 ? t_.substr(0, 77) + "..." : t_;
    throw InvalidArgument("constraint '" + shown + "': " + msg + " at column " +
                          std::to_string(i_ + 1));
  }
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  bool word(const char* w) {
    skip();
    const size_t n = std::char_traits<char>::length(w);
    if (t_.compare(i_, n, w) != 0) return false;
    const bool alpha = std::isalpha(static_cast<unsigned char>(w[0]));
    if (alpha && i_ + n < t_.size() &&
        (std::isalnum(static_cast<unsigned char>(t_[i_ + n])) || t_[i_ + n] == '_'))
      return false;
    i_ += n;
    return true;
  }
  NodeP mk(N::Op op, NodeP a, NodeP b = nullptr) {
    auto n = std::make_shared<N>();
    n->op = op;
    n->depth = 1 + std::max(depth_of(a), depth_of(b));
    if (n->depth > kMaxTreeDepth)
      fail("expression deeper than " + std::to_string(kMaxTreeDepth) + " levels");
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }
  // Guards one level of recursion of the parser (parentheses, not, unary minus).
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxDepth)
        p.fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p.nesting_; }
  };
  NodeP parse_or() {
    NodeP l = parse_and();
    while (word("or") || word("||")) l = mk(N::kOr, l, parse_and());
    return l;
  }
  NodeP parse_and() {
    NodeP l = parse_not();
    while (word("and") || word("&&")) l = mk(N::kAnd, l, parse_not());
    return l;
  }
  NodeP parse_not() {
    skip();
    if (word("not")) {
      Nest guard(*this);
      return mk(N::kNot, parse_not());
    }
    if (i_ < t_.size() && t_[i_] == '!' && (i_ + 1 >= t_.size() || t_[i_ + 1] != '=')) {
      ++i_;
      Nest guard(*this);
      return mk(N::kNot, parse_not());
    }
    return parse_cmp();
  }
  NodeP parse_cmp() {
    NodeP l = parse_sum();
    static const std::pair<const char*, N::Op> ops[] = {{"<=", N::kLe}, {">=", N::kGe},
                                                        {"==", N::kEq}, {"!=", N::kNe},
                                                        {"<", N::kLt},  {">", N::kGt}};
    for (const auto& [s, op] : ops)
      if (word(s)) return mk(op, l, parse_sum());
    return l;
  }
  NodeP parse_sum() {
    NodeP l = parse_prod();
    for (;;) {
      if (word("+"))
        l = mk(N::kAdd, l, parse_prod());
      else if (word("-"))
        l = mk(N::kSub, l, parse_prod());
      else
        return l;
    }
  }
  NodeP parse_prod() {
    NodeP l = parse_unary();
    for (;;) {
      if (word("*"))
        l = mk(N::kMul, l, parse_unary());
      else if (word("/"))
        l = mk(N::kDiv, l, parse_unary());
      else if (word("%"))
        l = mk(N::kMod, l, parse_unary());
      else
        return l;
    }
  }
  NodeP parse_unary() {
    if (word("-")) {
      Nest guard(*this);
      return mk(N::kNeg, parse_unary());
    }
    return parse_atom();
  }
  NodeP parse_atom() {
    skip();
    if (i_ >= t_.size()) fail("unexpected end");
    const char c = t_[i_];
    if (c == '(') {
      ++i_;
      Nest guard(*this);
      NodeP n = parse_or();
      if (!word(")")) fail("missing ')'");
      return n;
    }
    auto n = std::make_shared<N>();
    if (c == '\'' || c == '"') {
      const size_t end = t_.find(c, i_ + 1);
      if (end == std::string::npos) fail("unterminated string");
      n->op = N::kStr;
      n->str = t_.substr(i_ + 1, end - i_ - 1);
      i_ = end + 1;
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      char* end = nullptr;
      n->op = N::kNum;
      n->num = std::strtod(t_.c_str() + i_, &end);
      if (end == t_.c_str() + i_) fail("malformed number");
      i_ = static_cast<size_t>(end - t_.c_str());
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t b = i_;
      while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_'))
        ++i_;
      n->op = N::kIdent;
      n->str = t_.substr(b, i_ - b);
      return n;
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  const std::string& t_;
  size_t i_ = 0;
  int nesting_ = 0;
};

NodeP map_text_of(const NodeP& n, const std::function<std::string(const std::string&)>& map) {
  if (!n) return n;
  auto m = std::make_shared<Expr::Node>(*n);
  if (m->op == N::kStr) m->str = map(m->str);
  m->a = map_text_of(n->a, map);
  m->b = map_text_of(n->b, map);
  return m;
}

void collect(const NodeP& n, std::vector<std::string>* out) {
  if (!n) return;
  if (n->op == N::kIdent) out->push_back(n->str);
  collect(n->a, out);
  collect(n->b, out);
}

struct Evaluator {
  const std::string& text;
  const std::function<ExprValue(const std::string&)>& lookup;

  [[noreturn]] void fail(const std::string& msg) const {
    throw InvalidArgument("constraint '" + text + "': " + msg);
  }
  double num(const ExprValue& v, const char* op) const {
    if (auto* d = std::get_if<double>(&v)) return *d;
    fail(std::string("operator ") + op + " needs numbers, got '" + std::get<std::string>(v) + "'");
  }
  static std::string to_text(const ExprValue& v) {
    if (auto* d = std::get_if<double>(&v)) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", *d);
      return b;
    }
    return std::get<std::string>(v);
  }
  static bool truthy(const ExprValue& v) {
    if (auto* d = std::get_if<double>(&v)) return *d != 0;
    return !std::get<std::string>(v).empty();
  }
  ExprValue eval(const NodeP& n) const {
    switch (n->op) {
      case N::kNum:
        return n->num;
      case N::kStr:
        return n->str;
      case N::kIdent:
        return lookup(n->str);
      case N::kNeg:
        return -num(eval(n->a), "-");
      case N::kNot:
        return truthy(eval(n->a)) ? 0.0 : 1.0;
      case N::kAnd:
        return truthy(eval(n->a)) && truthy(eval(n->b)) ? 1.0 : 0.0;
      case N::kOr:
        return truthy(eval(n->a)) || truthy(eval(n->b)) ? 1.0 : 0.0;
      case N::kAdd:
        return num(eval(n->a), "+") + num(eval(n->b), "+");
      case N::kSub:
        return num(eval(n->a), "-") - num(eval(n->b), "-");
      case N::kMul:
        return num(eval(n->a), "*") * num(eval(n->b), "*");
      case N::kDiv: {
        const double d = num(eval(n->b), "/");
        if (d == 0) fail("division by zero");
        return num(eval(n->a), "/") / d;
      }
      case N::kMod: {
        const double d = num(eval(n->b), "%");
        if (d == 0) fail("modulo by zero");
        return std::fmod(num(eval(n->a), "%"), d);
      }
      default:
        break;
    }
    const ExprValue a = eval(n->a), b = eval(n->b);
    int c = 0;
    if (a.index() != b.index())
      // A text axis compared with a number is a mistake (a misspelled value, a wrong axis),
      // never a constraint that is simply false.
      fail("compares text with a number ('" + to_text(a) + "' and '" + to_text(b) + "')");
    if (auto* x = std::get_if<double>(&a)) {
      const double y = std::get<double>(b);
      c = *x < y ? -1 : (*x > y ? 1 : 0);
    } else {
      c = std::get<std::string>(a).compare(std::get<std::string>(b));
    }
    switch (n->op) {
      case N::kLt:
        return c < 0 ? 1.0 : 0.0;
      case N::kLe:
        return c <= 0 ? 1.0 : 0.0;
      case N::kGt:
        return c > 0 ? 1.0 : 0.0;
      case N::kGe:
        return c >= 0 ? 1.0 : 0.0;
      case N::kEq:
        return c == 0 ? 1.0 : 0.0;
      case N::kNe:
        return c != 0 ? 1.0 : 0.0;
      default:
        break;
    }
    fail("internal: unknown operator");
  }
};

}  // namespace

Expr Expr::parse(const std::string& text) {
  Expr e;
  e.text_ = text;
  e.root_ = Parser(e.text_).parse();
  return e;
}

std::vector<std::string> Expr::identifiers() const {
  std::vector<std::string> out;
  collect(root_, &out);
  return out;
}

Expr Expr::map_text(const std::function<std::string(const std::string&)>& map) const {
  Expr e;
  e.text_ = text_;
  e.root_ = map_text_of(root_, map);
  return e;
}

bool Expr::eval(const std::function<ExprValue(const std::string&)>& lookup) const {
  Evaluator ev{text_, lookup};
  return Evaluator::truthy(ev.eval(root_));
}

}  // namespace kvlab::exp
