// Sampling for causal language models. Each step re-runs the cropped context without a KV cache
// (GPT-2's hidden_states takes a position offset so a cache can be added without changing callers);
// only the last position goes through the LM head, and InferenceModeGuard keeps no activations.
#include <algorithm>
#include <cmath>
#include <limits>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/models.h"

namespace lt::models {

int64_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed,
                     uint64_t counter) {
  LT_CHECK(!logits.empty(), "sample_token: empty logits", "the vocabulary has no entries", "check the model");
  const size_t V = logits.size();
  if (temperature <= 0) return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  double cutoff = -std::numeric_limits<double>::infinity();
  if (top_k > 0 && size_t(top_k) < V) {
    std::vector<float> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
    cutoff = sorted[size_t(top_k - 1)];
  }
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(V, 0.0);
  double total = 0;
  for (size_t i = 0; i < V; ++i) {
    if (logits[i] < cutoff) continue;
    p[i] = std::exp((double(logits[i]) - mx) / temperature);
    total += p[i];
  }
  const double u = double(rng_uniform(seed, counter)) * total;
  double acc = 0;
  size_t last = 0;
  for (size_t i = 0; i < V; ++i) {
    if (p[i] == 0) continue;
    acc += p[i];
    last = i;
    if (u < acc) return int64_t(i);
  }
  return int64_t(last);  // rounding left u at the very top
}

std::vector<int64_t> CausalLM::generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens, double temperature,
                                        int64_t top_k, uint64_t seed, const std::function<void(int64_t)>& on_token,
                                        const std::vector<int64_t>& stop_tokens, int64_t sample_below) {
  LT_CHECK(!prompt.empty(), "generate: empty prompt", "sampling needs at least one token to condition on",
           "pass a prompt of one or more tokens");
  LT_CHECK(max_new_tokens >= 0, "generate: max_new_tokens = " + std::to_string(max_new_tokens),
           "it must be >= 0", "pass a non-negative count");
  const int64_t V = vocab_size(), context = context_length();
  for (int64_t t : prompt)
    LT_CHECK(t >= 0 && t < V, "generate: prompt token " + std::to_string(t) + " is out of range",
             "the vocabulary has " + std::to_string(V) + " entries", "tokenize with the model's tokenizer");

  InferenceModeGuard no_activations;
  struct RestoreMode {  // generate runs in eval mode, then leaves the model as it found it
    CausalLM* m;
    bool training;
    ~RestoreMode() { m->train(training); }
  } restore{this, is_training()};
  eval();

  const Device dev = device();
  std::vector<int64_t> seq = prompt;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const size_t start = seq.size() > size_t(context) ? seq.size() - size_t(context) : 0;
    std::vector<int64_t> ctx(seq.begin() + int64_t(start), seq.end());
    std::vector<float> logits = next_token_logits(from_ints(ctx, {1, int64_t(ctx.size())}, DType::I64, dev)).to_float_vector();
    if (sample_below > 0 && sample_below < int64_t(logits.size())) logits.resize(size_t(sample_below));
    int64_t tok = sample_token(logits, temperature, top_k, seed, uint64_t(step));
    seq.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(stop_tokens.begin(), stop_tokens.end(), tok) != stop_tokens.end()) break;
  }
  return seq;
}

Tensor GPT2::next_token_logits(const Tensor& ids) {
  Tensor h = hidden_states(ids);
  return head(reshape(select(h, 1, ids.size(1) - 1), {1, cfg_.n_embd}));
}

}  // namespace lt::models
