// The parsed template: expressions and statements of the Jinja subset chat templates use.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace lt::text::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

enum class Ex {
  Literal,   // value
  Name,      // name
  Attr,      // a[0].name
  Item,      // a[0][a[1]]
  Slice,     // a[0][a[1]:a[2]:a[3]] (null parts are missing)
  Call,      // a[0](a[1..], kw)
  Filter,    // a[0] | name(a[1..], kw)
  Test,      // a[0] is [not] name(a[1..])
  Binary,    // a[0] op a[1]: + - * / // % ** ~ and or
  Compare,   // a[0] ops[0] a[1] ops[1] a[2] ...: == != < > <= >= in notin
  Unary,     // op a[0]: - + not
  Cond,      // a[1] if a[0] else a[2] (a[2] may be null)
  List,      // [a...]
  Tuple,     // (a...)
  DictLit,   // {a[0]: a[1], a[2]: a[3], ...}
};

struct Expr {
  Ex type;
  int line = 0;
  std::string name;  // Name, Attr, Call-free names, Filter, Test, Binary/Unary op
  bool negated = false;  // Test
  Value value;           // Literal
  std::vector<ExprPtr> a;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  std::vector<std::string> ops;  // Compare
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class St { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Generation };

struct Stmt {
  St type;
  int line = 0;
  std::string text;                  // Text
  ExprPtr expr;                      // Output, For's iterable, Set's value
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body) ...
  Body body, else_body;              // If's else, For's body/else, SetBlock, Macro, Generation
  std::vector<std::string> targets;  // For's loop variables; Set's name (and attribute: {ns, attr})
  bool attr_target = false;          // Set: ns.attr = ...
  ExprPtr filter;                    // For's "if" condition
  std::string name;                  // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters and defaults
};

// Parses `source` (lex + parse); throws RenderError ("line N: ...") on a syntax error or a
// construct outside the subset.
Body parse(const std::string& source);

}  // namespace lt::text::jinja
