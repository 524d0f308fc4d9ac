// A recursive-descent parser following jinja2's own grammar and precedence (parser.py):
// conditional < or < and < not < comparisons and `in` < + - < ~ < * / // % < ** < unary - +,
// with filters, tests, calls, attributes and subscripts binding tightest.
#include <set>

#include "text/jinja_ast.h"
#include "text/jinja_error.h"
#include "text/jinja_lexer.h"

namespace lt::text::jinja {

namespace {

[[noreturn]] void fail_at(int line, const std::string& why) {
  throw RenderError("line " + std::to_string(line) + ": " + why);
}

struct Parser {
  std::vector<Token> toks;
  size_t p = 0;

  const Token& cur() const { return toks[p]; }
  const Token& peek(size_t k = 1) const { return toks[std::min(p + k, toks.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++p;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++p;
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::End: return "the end of the template";
      case Tok::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail_at(cur().line, std::string("expected '") + op + "', found " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur().line, "expected a name, found " + describe(cur()));
    return toks[p++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at(cur().line, "expected '%}', found " + describe(cur()));
    ++p;
  }

  ExprPtr node(Ex type, int line, std::vector<ExprPtr> a = {}, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->type = type;
    e->line = line;
    e->a = std::move(a);
    e->name = std::move(name);
    return e;
  }

  // ---- expressions ----
  ExprPtr tuple_expr(bool condexpr = true) {
    const int line = cur().line;
    ExprPtr first = condexpr ? expression() : or_expr();
    if (!is_op(",")) return first;
    std::vector<ExprPtr> items{first};
    while (accept_op(",")) {
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) break;
      items.push_back(condexpr ? expression() : or_expr());
    }
    return node(Ex::Tuple, line, std::move(items));
  }

  ExprPtr expression() {
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = cur().line;
      ++p;
      ExprPtr cond = or_expr();
      ExprPtr other = accept_name("else") ? expression() : nullptr;
      e = node(Ex::Cond, line, {cond, e, other});
    }
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = toks[p++].line;
      e = node(Ex::Binary, line, {e, and_expr()}, "or");
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = toks[p++].line;
      e = node(Ex::Binary, line, {e, not_expr()}, "and");
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      const int line = toks[p++].line;
      return node(Ex::Unary, line, {not_expr()}, "not");
    }
    return compare();
  }

  ExprPtr compare() {
    const int line = cur().line;
    ExprPtr first = math1();
    auto e = node(Ex::Compare, line, {first});
    for (;;) {
      static const std::set<std::string> ops{"==", "!=", "<", ">", "<=", ">="};
      if (cur().type == Tok::Op && ops.count(cur().text)) {
        e->ops.push_back(toks[p++].text);
      } else if (is_name("in")) {
        ++p;
        e->ops.push_back("in");
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        p += 2;
        e->ops.push_back("notin");
      } else {
        break;
      }
      e->a.push_back(math1());
    }
    return e->ops.empty() ? first : e;
  }

  ExprPtr binary_level(ExprPtr (Parser::*next)(), std::initializer_list<const char*> ops) {
    ExprPtr e = (this->*next)();
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (!hit) return e;
      const int line = toks[p++].line;
      e = node(Ex::Binary, line, {e, (this->*next)()}, hit);
    }
  }
  ExprPtr math1() { return binary_level(&Parser::concat, {"+", "-"}); }
  ExprPtr concat() { return binary_level(&Parser::math2, {"~"}); }
  ExprPtr math2() { return binary_level(&Parser::pow_expr, {"*", "/", "//", "%"}); }
  ExprPtr pow_expr() { return binary_level(&Parser::unary_filtered, {"**"}); }
  ExprPtr unary_filtered() { return unary(true); }

  // Nesting depth of expressions and blocks: a hostile template must not exhaust the stack.
  int depth = 0;
  static constexpr int kMaxDepth = 200;
  struct Deeper {
    Parser& ps;
    explicit Deeper(Parser& parser) : ps(parser) {
      if (++ps.depth > kMaxDepth) fail_at(ps.cur().line, "expressions or blocks nest more than 200 deep");
    }
    ~Deeper() { --ps.depth; }
  };

  ExprPtr unary(bool with_filter) {
    Deeper guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = toks[p++];
      e = node(Ex::Unary, t.line, {unary(false)}, t.text);
    } else {
      e = primary();
    }
    e = postfix(e);
    if (with_filter) e = filter_expr(e);
    return e;
  }

  ExprPtr primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      ++p;
      auto lit = [&](Value v) {
        auto e = node(Ex::Literal, t.line);
        e->value = std::move(v);
        return e;
      };
      if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
      if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
      if (t.text == "none" || t.text == "None") return lit(Value::none());
      return node(Ex::Name, t.line, {}, t.text);
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += toks[p++].text;  // adjacent strings join
      auto e = node(Ex::Literal, t.line);
      e->value = Value::string(s);
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      ++p;
      auto e = node(Ex::Literal, t.line);
      try {
        e->value = t.type == Tok::Int ? Value::integer(std::stoll(t.text)) : Value::number(std::stod(t.text));
      } catch (const std::exception&) {
        fail_at(t.line, "the number " + t.text + " is out of range");
      }
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return node(Ex::Tuple, t.line);
      ExprPtr first = expression();
      if (accept_op(")")) return first;
      std::vector<ExprPtr> items{first};
      while (accept_op(",")) {
        if (is_op(")")) break;
        items.push_back(expression());
      }
      expect_op(")");
      return node(Ex::Tuple, t.line, std::move(items));
    }
    if (accept_op("[")) {
      auto e = node(Ex::List, t.line);
      while (!is_op("]")) {
        e->a.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return e;
    }
    if (accept_op("{")) {
      auto e = node(Ex::DictLit, t.line);
      while (!is_op("}")) {
        e->a.push_back(expression());
        expect_op(":");
        e->a.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return e;
    }
    fail_at(t.line, "unexpected " + describe(t) + " in an expression");
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (accept_op(".")) {
        if (cur().type == Tok::Int) {
          auto key = node(Ex::Literal, line);
          try {
            key->value = Value::integer(std::stoll(toks[p].text));
          } catch (const std::exception&) {
            fail_at(line, "the index " + toks[p].text + " is out of range");
          }
          ++p;
          e = node(Ex::Item, line, {e, key});
        } else {
          e = node(Ex::Attr, line, {e}, expect_name());
        }
      } else if (accept_op("[")) {
        e = subscript(e, line);
      } else if (is_op("(")) {
        e = call(e);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, int line) {
    std::vector<ExprPtr> parts{obj};
    ExprPtr first = is_op(":") ? nullptr : expression();
    if (!is_op(":")) {
      expect_op("]");
      return node(Ex::Item, line, {obj, first});
    }
    parts.push_back(first);
    ++p;  // ':'
    parts.push_back(is_op(":") || is_op("]") ? nullptr : expression());
    if (accept_op(":")) parts.push_back(is_op("]") ? nullptr : expression());
    else parts.push_back(nullptr);
    expect_op("]");
    return node(Ex::Slice, line, std::move(parts));
  }

  // Arguments "(a, b, k=v)" into e->a (after what is already there) and e->kw.
  void call_args(const ExprPtr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail_at(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = toks[p].text;
        p += 2;
        e->kw.emplace_back(k, expression());
      } else {
        if (!e->kw.empty()) fail_at(cur().line, "a positional argument follows a keyword argument");
        e->a.push_back(expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee) {
    auto e = node(Ex::Call, cur().line, {callee});
    call_args(e);
    return e;
  }

  ExprPtr filter_expr(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (accept_op("|")) {
        std::string name = expect_name();
        while (accept_op(".")) {
          name += '.';
          name += expect_name();
        }
        auto f = node(Ex::Filter, line, {e}, name);
        if (is_op("(")) call_args(f);
        e = f;
      } else if (accept_name("is")) {
        const bool neg = accept_name("not");
        std::string name = expect_name();
        while (accept_op(".")) {
          name += '.';
          name += expect_name();
        }
        auto t = node(Ex::Test, line, {e}, name);
        t->negated = neg;
        if (is_op("(")) {
          call_args(t);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                    cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail_at(cur().line, "tests cannot be chained with 'is'");
          t->a.push_back(postfix(primary()));
        }
        e = t;
      } else if (is_op("(")) {
        e = call(e);
      } else {
        return e;
      }
    }
  }

  // ---- statements ----
  // Parses statements until a block tag named in `ends`; leaves p on that tag's name.
  Body body(const std::set<std::string>& ends) {
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (ends.empty()) return out;
        fail_at(t.line, "the template ends inside a block: expected {% " + *ends.begin() + " %}");
      }
      if (t.type == Tok::Text) {
        auto s = std::make_shared<Stmt>();
        s->type = St::Text;
        s->line = t.line;
        s->text = t.text;
        out.push_back(s);
        ++p;
      } else if (t.type == Tok::VarBegin) {
        ++p;
        auto s = std::make_shared<Stmt>();
        s->type = St::Output;
        s->line = t.line;
        s->expr = tuple_expr();
        if (cur().type != Tok::VarEnd) fail_at(cur().line, "expected '}}', found " + describe(cur()));
        ++p;
        out.push_back(s);
      } else if (t.type == Tok::BlockBegin) {
        ++p;
        if (cur().type != Tok::Name) fail_at(cur().line, "expected a tag name after '{%'");
        if (ends.count(cur().text)) return out;
        out.push_back(statement());
      } else {
        fail_at(t.line, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr statement() {
    Deeper guard(*this);
    const Token& t = toks[p];
    auto s = std::make_shared<Stmt>();
    s->line = t.line;
    const std::string tag = t.text;
    ++p;
    if (tag == "if") {
      s->type = St::If;
      ExprPtr cond = tuple_expr(false);
      for (;;) {
        expect_block_end();
        Body b = body({"elif", "else", "endif"});
        s->branches.emplace_back(cond, std::move(b));
        const std::string end = toks[p++].text;
        if (end == "elif") {
          cond = tuple_expr(false);
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = body({"endif"});
          ++p;
        }
        break;
      }
    } else if (tag == "for") {
      s->type = St::For;
      s->targets = assign_targets();
      if (!accept_name("in")) fail_at(cur().line, "expected 'in' in a for loop, found " + describe(cur()));
      s->expr = tuple_expr(false);
      if (accept_name("if")) s->filter = expression();
      if (is_name("recursive")) fail_at(cur().line, "recursive for loops are not supported");
      expect_block_end();
      s->body = body({"else", "endfor"});
      if (toks[p++].text == "else") {
        expect_block_end();
        s->else_body = body({"endfor"});
        ++p;
      }
    } else if (tag == "set") {
      std::string name = expect_name();
      s->targets = {name};
      if (accept_op(".")) {
        s->attr_target = true;
        s->targets.push_back(expect_name());
      } else if (is_op(",")) {
        fail_at(cur().line, "{% set a, b = ... %} (unpacking) is not supported");
      }
      if (accept_op("=")) {
        s->type = St::Set;
        s->expr = tuple_expr();
      } else {
        if (is_op("|")) fail_at(cur().line, "a filter on a {% set %} block is not supported");
        if (s->attr_target) fail_at(cur().line, "a {% set %} block cannot assign an attribute");
        s->type = St::SetBlock;
        expect_block_end();
        s->body = body({"endset"});
        ++p;
      }
    } else if (tag == "macro") {
      s->type = St::Macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string param = expect_name();
        ExprPtr dflt = accept_op("=") ? expression() : nullptr;
        s->params.emplace_back(param, dflt);
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      s->body = body({"endmacro"});
      ++p;
      if (cur().type == Tok::Name && cur().text == s->name) ++p;
    } else if (tag == "break" || tag == "continue") {
      s->type = tag == "break" ? St::Break : St::Continue;
    } else if (tag == "generation") {
      s->type = St::Generation;
      expect_block_end();
      s->body = body({"endgeneration"});
      ++p;
    } else {
      static const std::set<std::string> known{"call", "filter", "raw", "include", "import", "from", "extends",
                                               "block", "with", "do", "autoescape", "trans"};
      if (known.count(tag)) fail_at(t.line, "the {% " + tag + " %} tag is not supported");
      fail_at(t.line, "unknown tag '" + tag + "' (or one closed without being opened)");
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> assign_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    names.push_back(expect_name());
    while (accept_op(",")) {
      if (is_op(")") || is_name("in")) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }
};

}  // namespace

Body parse(const std::string& source) {
  Parser ps;
  ps.toks = lex(source);
  Body b = ps.body({});
  return b;
}

}  // namespace lt::text::jinja
