// expr.h: constraint expressions of sweep studies (`where = context >= block_size`).
//
// Grammar (lowest precedence first):
//   or:   and ( ("or" | "||") and )*
//   and:  not ( ("and" | "&&") not )*
//   not:  ("not" | "!") not | cmp
//   cmp:  sum ( ("<" | "<=" | ">" | ">=" | "==" | "!=") sum )?
//   sum:  prod ( ("+" | "-") prod )*
//   prod: unary ( ("*" | "/" | "%") unary )*
//   unary: "-" unary | atom
//   atom: NUMBER | 'text' | "text" | AXIS_NAME | "(" or ")"
// Axis names evaluate to numbers for numeric axes and to text otherwise; comparing text
// with a number (== and != too), or an unknown name, is an error that names the expression.
// Limits (any input, however hostile, ends in an error, never a crash): 4096 characters,
// 64 levels of nesting (parentheses, not, unary minus), an expression tree 256 levels deep.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace kvlab::exp {

using ExprValue = std::variant<double, std::string>;

class Expr {
 public:
  struct Node;
  // Throws InvalidArgument with the position of a syntax error.
  static Expr parse(const std::string& text);
  // Names the expression refers to.
  std::vector<std::string> identifiers() const;
  // lookup(name) gives an axis value (throws for unknown names).
  bool eval(const std::function<ExprValue(const std::string&)>& lookup) const;
  // The same expression with every text literal replaced by map(literal) (sweep expansion
  // maps an axis's older value spellings to the values the points hold).
  Expr map_text(const std::function<std::string(const std::string&)>& map) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace kvlab::exp
