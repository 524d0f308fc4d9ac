// Module tree: names are validated at registration so every path is unique and dot-free per
// level; traversal order is registration order (own parameters first), as in PyTorch.
#include <unordered_set>

#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

void Module::check_new_name(const std::string& name) const {
  LT_CHECK(!name.empty() && name.find('.') == std::string::npos, "invalid module or parameter name '" + name + "'",
           "names must be non-empty and contain no '.'", "pick another name");
  for (const auto& [n, t] : params_)
    LT_CHECK(n != name, "duplicate name '" + name + "' in a " + type_name(), "a parameter already has it",
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

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  LT_ASSERT(m != nullptr);
  children_.emplace_back(name, std::move(m));
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameter_slots() {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [path, m] : named_modules()) {
    for (auto& [name, t] : m->params_) {
      if (!seen.insert(t.impl()).second) continue;  // tied: keep the first name
      out.emplace_back(path.empty() ? name : path + "." + name, &t);
    }
  }
  return out;
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
  return wrapper_ ? wrapper_(*this, x, forward) : forward(x);
}

void ModuleList::append(std::shared_ptr<Module> m, const std::string& name) {
  register_module(name.empty() ? std::to_string(size()) : name, std::move(m));
}

}  // namespace lt::nn
