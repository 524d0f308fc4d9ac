#include "leantrain/autograd.h"

namespace lt {

namespace {
thread_local bool t_grad = true;
thread_local bool t_inference = false;
}  // namespace

bool grad_enabled() { return t_grad; }
bool inference_mode() { return t_inference; }

NoGradGuard::NoGradGuard() : prev_(t_grad) { t_grad = false; }
NoGradGuard::~NoGradGuard() { t_grad = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad) { t_grad = true; }
EnableGradGuard::~EnableGradGuard() { t_grad = prev_; }
InferenceModeGuard::InferenceModeGuard() : prev_grad_(t_grad), prev_inf_(t_inference) {
  t_grad = false;
  t_inference = true;
}
InferenceModeGuard::~InferenceModeGuard() {
  t_grad = prev_grad_;
  t_inference = prev_inf_;
}

}  // namespace lt
