// Module tree: names are validated at registration so every path is unique and dot-free per
// level; traversal order is registration order (own parameters first), as in PyTorch.
#include <regex>
#include <unordered_set>

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

void Module::check_new_name(const std::string& name) const {
  LT_CHECK(!name.empty() && name.find('.') == std::string::npos, "invalid module or parameter name '" + name + "'",
           "names must be non-empty and contain no '.'", "pick another name");
  for (const auto& [n, t] : params_)
    LT_CHECK(n != name, "duplicate name '" + name + "' in a " + type_name(), "a parameter already has it",
             "register each name once");
  for (const auto& [n, t] : buffers_)
    LT_CHECK(n != name, "duplicate name '" + name + "' in a " + type_name(), "a buffer already has it",
             "register each name once");
  for (const auto& [n, m] : children_)
    LT_CHECK(n != name, "duplicate name '" + name + "' in a " + type_name(), "a submodule already has it",
             "register each name once");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  LT_ASSERT(t.defined());
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  LT_ASSERT(t.defined());
  t.set_requires_grad(false);
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m, Accepts accepts) {
  check_new_name(name);
  LT_ASSERT(m != nullptr);
  children_.emplace_back(name, std::move(m));
  accepts_.push_back(std::move(accepts));
}

std::vector<std::pair<std::string, Tensor*>> Module::named_slots(bool buffers) {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [path, m] : named_modules()) {
    for (auto& [name, t] : buffers ? m->buffers_ : m->params_) {
      if (!seen.insert(t.impl()).second) continue;  // tied: keep the first name
      out.emplace_back(path.empty() ? name : path + "." + name, &t);
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameter_slots() { return named_slots(false); }
std::vector<std::pair<std::string, Tensor*>> Module::named_buffer_slots() { return named_slots(true); }

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, slot] : const_cast<Module*>(this)->named_slots(true)) out.emplace_back(name, *slot);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_trainable_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : named_parameters())
    if (t.requires_grad()) out.emplace_back(name, t);
  return out;
}

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_trainable_parameters()) out.push_back(t);
  return out;
}

int64_t Module::set_trainable(const std::string& pattern, bool on) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail("set_trainable: invalid regex '" + pattern + "'", e.what(), "pass a parameter name or an ECMAScript regex");
  }
  std::vector<Tensor*> hits;
  for (auto& [name, slot] : named_parameter_slots()) {
    if (!std::regex_match(name, re)) continue;
    LT_CHECK(!on || is_floating(slot->dtype()),
             "set_trainable: parameter '" + name + "' is " + dtype_name(slot->dtype()),
             "only floating parameters can train (quantized weights stay frozen)",
             "make a pattern that leaves it out, or train an adapter instead");
    hits.push_back(slot);
  }
  LT_CHECK(!hits.empty(), "set_trainable: no parameter matches '" + pattern + "'",
           "the pattern must match a whole parameter name", "list the names with named_parameters()");
  for (Tensor* t : hits) {
    t->set_requires_grad(on);
    if (!on) t->set_grad(Tensor());
  }
  return int64_t(hits.size());
}

void Module::replace_module(const std::string& path, std::shared_ptr<Module> m) {
  LT_CHECK(m != nullptr, "replace_module('" + path + "'): the replacement is null", "a module is needed",
           "pass a constructed module");
  const size_t dot = path.rfind('.');
  Module* owner = path.empty() ? nullptr : find_module(dot == std::string::npos ? "" : path.substr(0, dot));
  const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  size_t index = owner ? owner->children_.size() : 0;
  if (owner)
    for (size_t i = 0; i < owner->children_.size(); ++i)
      if (owner->children_[i].first == leaf) index = i;
  LT_CHECK(owner && index < owner->children_.size(), "replace_module: no module at '" + path + "'",
           std::string("the ") + type_name() + " has no submodule of that path", "list the paths with named_modules()");
  Module& old = *owner->children_[index].second;
  LT_CHECK(owner->accepts_[index] != nullptr,
           "replace_module: '" + path + "' (a " + old.type_name() + ") cannot be replaced",
           std::string("its ") + owner->type_name() + " calls it through a pointer of its own",
           "replace a module its owner registered with register_child (e.g. the Linears, norms, MLP and attention "
           "of a block)");
  LT_CHECK(owner->accepts_[index](*m),
           "replace_module: the replacement for '" + path + "' is a " + m->type_name(),
           std::string("its ") + owner->type_name() + " calls the " + old.type_name() +
               " there through an interface the replacement does not implement",
           "derive the replacement from the interface of the module it replaces (e.g. UnaryModule for a Linear)");
  m->train(old.is_training());
  owner->children_[index].second = std::move(m);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, slot] : const_cast<Module*>(this)->named_parameter_slots()) out.emplace_back(name, *slot);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (auto& [name, m] : children_) m->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

Module* Module::find_module(const std::string& path) {
  if (path.empty()) return this;
  Module* m = this;
  size_t start = 0;
  while (m && start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Module* next = nullptr;
    for (auto& [n, c] : m->children_)
      if (n == part) next = c.get();
    m = next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

Tensor Module::parameter(const std::string& name) const {
  size_t dot = name.rfind('.');
  Module* owner = const_cast<Module*>(this);
  if (dot != std::string::npos) owner = owner->find_module(name.substr(0, dot));
  std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  if (owner)
    for (auto& [n, t] : owner->params_)
      if (n == leaf) return t;
  fail("no parameter named '" + name + "'", std::string("the ") + type_name() + " has no such parameter",
       "list the names with named_parameters()");
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

int64_t Module::parameter_bytes() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.nbytes();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

Tensor Module::call_forward(const Tensor& x, const ForwardFn& forward) {
  // A parameter from a flat ParamFactory has no memory until materialize(): one clear error
  // instead of a kernel reading nothing. A wrapper may bring the memory first (fsdp gathers a
  // unit's parameters), so under one the check runs where the module's own forward starts. A
  // parameter that autocast hands out a 16-bit copy of (fsdp's gathered copies) needs none.
  auto check = [this] {
    for (const auto& [name, t] : params_)
      LT_CHECK(t.storage() != nullptr || detail::has_precast(t),
               std::string("parameter '") + name + "' of a " + type_name() + " has no memory yet",
               "its flat ParamFactory has not materialized the parameter store",
               "call ParamFactory::materialize() after building the modules");
  };
  if (!wrapper_) {
    check();
    return forward(x);
  }
  return wrapper_(*this, x, [check, forward](const Tensor& in) {
    check();
    return forward(in);
  });
}

void ModuleList::append(std::shared_ptr<Module> m, const std::string& name, bool owner_keeps_it) {
  const std::string n = name.empty() ? std::to_string(size()) : name;
  if (owner_keeps_it) register_module(n, std::move(m));
  else register_child(n, std::move(m));
}

void ModuleList::entry_kind_error(size_t i) const {
  fail("module list entry '" + children()[i].first + "' is a " + children()[i].second->type_name(),
       "its owner calls it as another kind (it was replaced by a module of another class)",
       "replace list entries with modules of the class they replace");
}

}  // namespace lt::nn
