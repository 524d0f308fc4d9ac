#include "leantrain/memory.h"

namespace lt {

const char* category_name(Category c) {
  switch (c) {
    case Category::Parameter: return "parameter";
    case Category::Gradient: return "gradient";
    case Category::OptimizerState: return "optimizer_state";
    case Category::Activation: return "activation";
    case Category::Input: return "input";
    case Category::Workspace: return "workspace";
    case Category::Other: return "other";
  }
  return "?";
}

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Device: return "device";
    case MemoryKind::PinnedHost: return "pinned host";
    case MemoryKind::Disk: return "disk";
  }
  return "?";
}

const char* action_name(MemoryEvent::Action a) {
  switch (a) {
    case MemoryEvent::Action::Alloc: return "alloc";
    case MemoryEvent::Action::Free: return "free_completed";
    case MemoryEvent::Action::SegmentAlloc: return "segment_alloc";
    case MemoryEvent::Action::SegmentFree: return "segment_free";
    case MemoryEvent::Action::Oom: return "oom";
    case MemoryEvent::Action::Retag: return "retag";
  }
  return "?";
}

namespace {
thread_local Category t_category = Category::Other;
thread_local const char* t_op = "";
}  // namespace

Category current_category() { return t_category; }
MemoryCategoryScope::MemoryCategoryScope(Category c) : prev_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = prev_; }

const char* current_op() { return t_op; }
OpNameScope::OpNameScope(const char* name) : prev_(t_op) { t_op = name; }
OpNameScope::~OpNameScope() { t_op = prev_; }

}  // namespace lt
