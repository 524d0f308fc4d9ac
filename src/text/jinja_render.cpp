// Rendering a parsed template. Scopes follow jinja2: a for loop's body gets a fresh scope on
// every iteration (a {% set %} inside it is gone at the next iteration and after the loop, which
// is why templates carry state across iterations in namespace() objects); if blocks share their
// enclosing scope; a macro call gets its own scope over the one it was defined in.
#include <unordered_map>

#include "text/jinja.h"
#include "text/jinja_ast.h"
#include "text/jinja_error.h"
#include "text/jinja_filters.h"
#include "text/jinja_ops.h"
#include "text/json_read.h"

namespace lt::text::jinja {

namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { Normal, Break, Continue };

// Loop controls unwind to their loop; at a macro boundary or the top they are an error.
struct Interp {
  const std::string* main_out = nullptr;
  std::vector<std::pair<size_t, size_t>> generation;
  int line = 0;
  int loop_depth = 0;
  int call_depth = 0;
  static constexpr int kMaxCallDepth = 100;  // jinja2 would hit Python's recursion limit
  std::time_t now = 0;

  Value lookup(const FramePtr& f, const std::string& name) {
    for (Frame* fr = f.get(); fr; fr = fr->parent.get()) {
      auto it = fr->vars.find(name);
      if (it != fr->vars.end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  CallArgs args_of(const Expr& e, size_t first, const FramePtr& f) {
    CallArgs a;
    for (size_t k = first; k < e.a.size(); ++k) a.pos.push_back(eval(e.a[k], f));
    for (const auto& [k, x] : e.kw) a.kw.emplace_back(k, eval(x, f));
    return a;
  }

  Value eval(const ExprPtr& ep, const FramePtr& f) {
    const Expr& e = *ep;
    line = e.line;
    switch (e.type) {
      case Ex::Literal: return e.value;
      case Ex::Name: return lookup(f, e.name);
      case Ex::Attr: {
        Value obj = eval(e.a[0], f);
        line = e.line;
        return get_attr(obj, e.name);
      }
      case Ex::Item: {
        Value obj = eval(e.a[0], f), key = eval(e.a[1], f);
        line = e.line;
        return get_item(obj, key);
      }
      case Ex::Slice: {
        Value obj = eval(e.a[0], f);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.a[size_t(k) + 1]) parts[k] = eval(e.a[size_t(k) + 1], f);
        line = e.line;
        return get_slice(obj, e.a[1] ? &parts[0] : nullptr, e.a[2] ? &parts[1] : nullptr, e.a[3] ? &parts[2] : nullptr);
      }
      case Ex::Call: {
        Value callee = eval(e.a[0], f);
        CallArgs a = args_of(e, 1, f);
        line = e.line;
        if (callee.is_undefined()) undefined_error(callee);
        if (callee.kind != Kind::Callable) throw RenderError("TypeError: '" + type_name(callee) + "' object is not callable");
        return (*callee.fn)(a);
      }
      case Ex::Filter: {
        Value v = eval(e.a[0], f);
        CallArgs a = args_of(e, 1, f);
        line = e.line;
        return apply_filter(e.name, v, a);
      }
      case Ex::Test: {
        Value v = eval(e.a[0], f);
        CallArgs a = args_of(e, 1, f);
        line = e.line;
        return Value::boolean(apply_test(e.name, v, a) != e.negated);
      }
      case Ex::Binary: {
        if (e.name == "and" || e.name == "or") {
          Value l = eval(e.a[0], f);
          if (truthy(l) == (e.name == "or")) return l;
          return eval(e.a[1], f);
        }
        Value l = eval(e.a[0], f), r = eval(e.a[1], f);
        line = e.line;
        return binary_op(e.name, l, r);
      }
      case Ex::Compare: {
        Value l = eval(e.a[0], f);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(e.a[k + 1], f);
          line = e.line;
          const std::string& op = e.ops[k];
          bool ok;
          if (op == "==") ok = equal(l, r);
          else if (op == "!=") ok = !equal(l, r);
          else if (op == "<") ok = less_than(l, r);
          else if (op == ">") ok = less_than(r, l);
          else if (op == "<=") ok = !less_than(r, l);
          else if (op == ">=") ok = !less_than(l, r);
          else if (op == "in") ok = contains(r, l);
          else ok = !contains(r, l);
          if (!ok) return Value::boolean(false);
          l = r;
        }
        return Value::boolean(true);
      }
      case Ex::Unary: {
        Value v = eval(e.a[0], f);
        line = e.line;
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) throw RenderError("TypeError: bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind == Kind::Bool ? Value::integer(v.b) : v;
        if (v.kind == Kind::Float) return Value::number(-v.f);
        return binary_op("-", Value::integer(0), v);
      }
      case Ex::Cond:
        if (truthy(eval(e.a[0], f))) return eval(e.a[1], f);
        return e.a[2] ? eval(e.a[2], f) : Value::undefined("the conditional expression had no else branch");
      case Ex::List: case Ex::Tuple: {
        List items;
        for (const auto& x : e.a) items.push_back(eval(x, f));
        return Value::make_list(std::move(items), e.type == Ex::Tuple);
      }
      case Ex::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          Value key = eval(e.a[k], f);
          line = e.line;
          if (!key.is_string()) throw RenderError("dict literals with non-string keys are not supported");
          d.set(key.s, eval(e.a[k + 1], f));
        }
        return Value::make_dict(std::move(d));
      }
    }
    return Value::undefined();
  }

  Flow exec(const Body& body, const FramePtr& f, std::string& out) {
    for (const StmtPtr& sp : body) {
      const Stmt& s = *sp;
      line = s.line;
      switch (s.type) {
        case St::Text: out += s.text; break;
        case St::Output: out += to_str(eval(s.expr, f)); break;
        case St::If: {
          bool done = false;
          for (const auto& [cond, b] : s.branches)
            if (truthy(eval(cond, f))) {
              if (Flow fl = exec(b, f, out); fl != Flow::Normal) return fl;
              done = true;
              break;
            }
          if (!done)
            if (Flow fl = exec(s.else_body, f, out); fl != Flow::Normal) return fl;
          break;
        }
        case St::For: run_for(s, f, out); break;
        case St::Set: {
          Value v = eval(s.expr, f);
          line = s.line;
          if (s.attr_target) {
            Value ns = lookup(f, s.targets[0]);
            if (ns.kind != Kind::Namespace)
              throw RenderError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
            ns.dict->set(s.targets[1], std::move(v));
          } else {
            f->vars[s.targets[0]] = std::move(v);
          }
          break;
        }
        case St::SetBlock: {
          std::string captured;
          exec_block(s.body, f, captured);
          f->vars[s.targets[0]] = Value::string(captured);
          break;
        }
        case St::Macro: f->vars[s.name] = make_macro(sp, f); break;
        case St::Break: case St::Continue:
          if (loop_depth == 0) throw RenderError("{% " + std::string(s.type == St::Break ? "break" : "continue") + " %} outside a loop");
          return s.type == St::Break ? Flow::Break : Flow::Continue;
        case St::Generation: {
          const size_t begin = out.size();
          if (Flow fl = exec(s.body, f, out); fl != Flow::Normal) return fl;
          if (&out == main_out) generation.emplace_back(begin, out.size());
          break;
        }
      }
    }
    return Flow::Normal;
  }

  // A body that loop controls must not leave (a set block, a macro).
  void exec_block(const Body& b, const FramePtr& f, std::string& out) {
    const int saved = loop_depth;
    loop_depth = 0;
    exec(b, f, out);
    loop_depth = saved;
  }

  void run_for(const Stmt& s, const FramePtr& f, std::string& out) {
    std::vector<Value> all = iterate(eval(s.expr, f));
    std::vector<Value> items;
    for (Value& v : all) {
      if (s.filter) {
        auto probe = std::make_shared<Frame>();
        probe->parent = f;
        bind_targets(s, *probe, v);
        if (!truthy(eval(s.filter, probe))) continue;
      }
      items.push_back(std::move(v));
    }
    if (items.empty()) {
      exec(s.else_body, f, out);
      return;
    }
    const int64_t n = int64_t(items.size());
    ++loop_depth;
    for (int64_t k = 0; k < n; ++k) {
      auto it = std::make_shared<Frame>();
      it->parent = f;
      bind_targets(s, *it, items[size_t(k)]);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item"));
      loop.set("depth", Value::integer(1));  // depth counts recursive loops only, which are not supported
      loop.set("depth0", Value::integer(0));
      loop.set("cycle", Value::callable("loop.cycle", [k](CallArgs& a) {
                 if (a.pos.empty()) throw RenderError("loop.cycle() needs at least one argument");
                 return a.pos[size_t(k) % a.pos.size()];
               }));
      it->vars["loop"] = Value::make_dict(std::move(loop));
      if (exec(s.body, it, out) == Flow::Break) break;
    }
    --loop_depth;
  }

  void bind_targets(const Stmt& s, Frame& fr, const Value& v) {
    if (s.targets.size() == 1) {
      fr.vars[s.targets[0]] = v;
      return;
    }
    std::vector<Value> parts = iterate(v);
    if (parts.size() != s.targets.size())
      throw RenderError("ValueError: cannot unpack " + std::to_string(parts.size()) + " values into " +
                        std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) fr.vars[s.targets[k]] = parts[k];
  }

  Value make_macro(const StmtPtr& sp, const FramePtr& defined_in) {
    std::weak_ptr<Frame> scope = defined_in;  // the frame owns the macro: no cycle
    return Value::callable(sp->name, [this, sp, scope](CallArgs& a) {
      const Stmt& s = *sp;
      auto fr = std::make_shared<Frame>();
      fr->parent = scope.lock();
      if (a.pos.size() > s.params.size()) throw RenderError("macro '" + s.name + "' takes " + std::to_string(s.params.size()) + " arguments");
      for (size_t k = 0; k < s.params.size(); ++k) {
        const auto& [pname, dflt] = s.params[k];
        const Value* given = a.get(k, pname.c_str());
        fr->vars[pname] = given ? *given : dflt ? eval(dflt, fr) : Value::undefined("'" + pname + "' is undefined");
      }
      for (const auto& [k, v] : a.kw) {
        bool known = false;
        for (const auto& p : s.params) known = known || p.first == k;
        if (!known) throw RenderError("macro '" + s.name + "' takes no keyword argument '" + k + "'");
      }
      if (++call_depth > kMaxCallDepth)
        throw RenderError("macro '" + s.name + "' nests calls more than " + std::to_string(kMaxCallDepth) + " deep");
      const int saved_line = line;
      std::string out;
      exec_block(s.body, fr, out);
      line = saved_line;
      --call_depth;
      return Value::string(out);
    });
  }
};

Value make_namespace(CallArgs& a) {
  Value ns;
  ns.kind = Kind::Namespace;
  ns.dict = std::make_shared<Dict>();
  for (const Value& p : a.pos) {
    if (!p.is_mapping()) throw RenderError("namespace() takes keyword arguments or a dict");
    for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
  }
  for (const auto& [k, v] : a.kw) ns.dict->set(k, v);
  return ns;
}

Value range_fn(CallArgs& a) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) throw RenderError("range() takes 1 to 3 integer arguments");
  for (const Value& v : a.pos)
    if (v.kind != Kind::Int) throw RenderError("range() takes integer arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) stop = a.pos[0].i;
  else start = a.pos[0].i, stop = a.pos[1].i;
  if (a.pos.size() == 3) step = a.pos[2].i;
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
  const __int128 n128 = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
  const int64_t n = n128 > 100001 ? 100001 : int64_t(n128);
  if (n > 100000) throw RenderError("range() of more than 100,000 items is unsafe in the sandbox (as jinja2's MAX_RANGE)");
  List out;
  for (int64_t k = 0; k < n; ++k) out.push_back(Value::integer(start + k * step));
  return Value::make_list(std::move(out));
}

bool any_generation(const Body& body) {
  for (const StmtPtr& s : body) {
    if (s->type == St::Generation) return true;
    bool inner = any_generation(s->body) || any_generation(s->else_body);
    for (const auto& br : s->branches) inner = inner || any_generation(br.second);
    if (inner) return true;
  }
  return false;
}

}  // namespace

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  try {
    body_ = parse(source);
  } catch (const RenderError& e) {
    fail("chat template " + name_, printable(e.what()),
         "docs/user-guide.md (Chat templates) lists the Jinja leantrain renders; fix the template or pass another");
  }
  has_generation_ = any_generation(body_);
}

RenderResult Template::render(const Dict& vars, std::time_t now) const {
  Interp in;
  in.now = now;
  auto globals = std::make_shared<Frame>();
  globals->vars["namespace"] = Value::callable("namespace", make_namespace);
  globals->vars["range"] = Value::callable("range", range_fn);
  globals->vars["dict"] = Value::callable("dict", [](CallArgs& a) {
    if (!a.pos.empty()) throw RenderError("dict() with positional arguments is not supported");
    Dict d;
    for (const auto& [k, v] : a.kw) d.set(k, v);
    return Value::make_dict(std::move(d));
  });
  globals->vars["raise_exception"] = Value::callable("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateRaised(a.pos.empty() ? "" : to_str(a.pos[0]));
  });
  globals->vars["strftime_now"] = Value::callable("strftime_now", [now](CallArgs& a) {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) throw RenderError("strftime_now(format) takes one string");
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
    if (n == 0 && !a.pos[0].s.empty()) throw RenderError("strftime_now: the format gives an empty or too long text");
    return Value::string(std::string(buf, n));
  });
  auto top = std::make_shared<Frame>();
  top->parent = globals;
  for (const auto& [k, v] : vars.items) top->vars[k] = v;
  RenderResult r;
  in.main_out = &r.text;
  try {
    in.exec(body_, top, r.text);
  } catch (const TemplateRaised& e) {
    throw TemplateException("chat template " + name_ + " raised an exception at line " + std::to_string(in.line), printable(e.what()),
                            "the conversation breaks a rule of the model's template; change the conversation");
  } catch (const RenderError& e) {
    fail("chat template " + name_, "line " + std::to_string(in.line) + ": " + printable(e.what()),
         "docs/user-guide.md (Chat templates) lists the Jinja leantrain renders; check the conversation against the template");
  }
  r.generation = std::move(in.generation);
  return r;
}

}  // namespace lt::text::jinja
