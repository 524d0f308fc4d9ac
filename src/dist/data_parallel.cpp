// ddp / zero1 / zero2 as one StepHook (data_parallel.h explains the strategies).
#include "dist/data_parallel.h"
#include "dist/fsdp_units.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/checkpoint.h"
#include "leantrain/data.h"
#include "leantrain/ops.h"
#include "leantrain/precision.h"
#include "memory/streams.h"
#include "train/trainer.h"
#include "core/knobs.h"

namespace lt::dist {

namespace {


using Strategy = StrategyKind;

// Where a tensor starts in its storage, in bytes. Runs are measured with it rather than with
// addresses: a plan's meta storage has none.
int64_t byte_offset(const Tensor& t) { return t.offset() * int64_t(dtype_size(t.dtype())); }

// Parameters in one bucket: consecutive (in reverse registration order), one dtype.
struct Bucket {
  std::vector<int> params;  // indices into DataParallel::params_
  int ready = 0;
  bool reduced = false;
};

// A run of consecutive bytes of one storage that one rank owns: broadcast in one call.
struct Run {
  int owner;
  int first, last;  // parameter indices, inclusive
};

class DataParallel final : public StepHook {
 public:
  // Buckets of `bucket_bytes` of gradients (--bucket-mb, PyTorch DDP's bucket_cap_mb, 25 by
  // default). in_flight (--buckets-in-flight, 2): buckets whose reduction may still run on the
  // communication stream when the next one starts: issuing bucket b makes the compute stream wait
  // for bucket b - 2. The wait is by program order, so a plan replays it (Note [Cross-stream
  // reuse]); it bounds the staging buffers and lets the gradients ZeRO-2 drops go back to the
  // compute stream's pool during backward.
  DataParallel(Communicator& comm, Strategy s, int64_t micro_batches, size_t in_flight, int64_t bucket_bytes)
      : comm_(comm), max_in_flight_(in_flight), bucket_bytes_(bucket_bytes), strategy_(s), k_(micro_batches) {}
  ~DataParallel() override {
    if (table_ >= 0) set_table_grad_sink(params_[size_t(table_)], {});
  }
  const char* name() const override { return "data-parallel"; }
  bool sharded() const { return strategy_ != Strategy::Ddp; }
  FsdpUnits* units() { return units_.get(); }

  void on_start(Trainer& t) override {
    device_ = t.device();
    for (auto& [n, p] : t.model().named_trainable_parameters()) params_.push_back(p);
    owner_ = owners_for(t.config(), t.model(), params_, comm_.size());
    if (strategy_ == Strategy::Fsdp)
      units_ = std::make_unique<FsdpUnits>(comm_, t.model(), params_, owner_, t.config().reshard_after_forward, device_,
                                           fsdp_gather_dtype(t.config()));
    // A tied table under an all-reduce strategy: its lookup's rows come to table_rows() instead
    // of through autograd, so the head's dense part is reduced as soon as the head's backward is
    // done (in a bucket of its own), while the blocks' backward runs, not after the lookup's at
    // the very end.
    const Tensor tied = t.model().tied_table();
    if ((strategy_ == Strategy::Ddp || strategy_ == Strategy::Zero1) && tied.defined())
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].impl() == tied.impl()) table_ = int(i);
    make_buckets();
    make_runs();
    fired_.assign(params_.size(), -1);
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].register_post_accumulate_grad_hook([this, i](Tensor&) {
        fired_[i] = micro_serial_;
        if (int(i) == table_ && !gather_rows()) return;  // table_rows() adds the rows, then counts it
        ready(int(i));
        if (units_) units_->grad_ready(i);
      });
    if (table_ >= 0)
      set_table_grad_sink(tied, [this](const Tensor& ids, const Tensor& rows, int64_t skip_id) {
        table_rows(ids, rows, skip_id);
      });
  }

  void on_batch(Batch& b) override {
    const int64_t rows = b.inputs.size(0), w = comm_.size(), r = comm_.rank();
    if (rows % w != 0)
      fail("a micro-batch of " + std::to_string(rows) + " rows", "it does not split evenly over " + std::to_string(w) + " ranks",
           "make --micro-batch (or --batch) a multiple of the world size");
    b.inputs = slice(b.inputs, 0, r * rows / w, (r + 1) * rows / w);
    tokens_ = b.inputs.numel();
    b.targets = slice(b.targets, 0, r * rows / w, (r + 1) * rows / w);
    if (b.aux.defined()) b.aux = slice(b.aux, 0, r * rows / w, (r + 1) * rows / w);
    if (b.doc_pos.defined()) b.doc_pos = slice(b.doc_pos, 0, r * rows / w, (r + 1) * rows / w);
    if (b.text_mask.defined()) b.text_mask = slice(b.text_mask, 0, r * rows / w, (r + 1) * rows / w);
    if (!b.row_tokens.empty())
      b.row_tokens = std::vector<int64_t>(b.row_tokens.begin() + r * rows / w, b.row_tokens.begin() + (r + 1) * rows / w);
  }

  // The held-out batches split as the training ones: each rank evaluates its rows, and the
  // ranks' sums add up to the one-process evaluation (rank order).
  // A last batch that does not split is evaluated whole by every rank (fsdp's forward gathers
  // with the others) and counted by rank 0 alone.
  bool on_eval_batch(Batch& b) override {
    if (b.inputs.size(0) % comm_.size() != 0) return comm_.rank() == 0;
    on_batch(b);
    return true;
  }
  void reduce_eval(EvalSums& s) override {
    constexpr int n = 5;
    const double mine[n] = {s.loss, s.count, s.correct, s.chosen, s.rejected};
    std::vector<double> all(size_t(n * comm_.size()));
    comm_.all_gather(mine, all.data(), n, DType::F64);
    s = EvalSums{};
    for (int r = 0; r < comm_.size(); ++r) {
      const double* a = all.data() + n * r;
      s.loss += a[0], s.count += a[1], s.correct += a[2], s.chosen += a[3], s.rejected += a[4];
    }
  }

  Tensor scale_loss(const Tensor& loss) override {
    ++micro_;  // called once per micro-batch, before its backward
    ++micro_serial_;
    return loss;
  }

  double reduce_loss(double loss) override {
    std::vector<double> all(size_t(comm_.size()));
    comm_.all_gather(&loss, all.data(), 1, DType::F64);  // bytes only: no f32 rounding
    double sum = 0;
    for (double x : all) sum += x;  // rank order
    return sum / double(comm_.size());
  }

  // Every rank checks and reports the step's norm before its update, as one (zero2: combined).
  bool norm_before_update() const override { return true; }

  // Under zero2 each rank holds the gradients of its shard only: the norm is the root of the
  // sum of the shards' squared norms (rank order). ddp and zero1 hold them all already.
  double reduce_grad_norm(double norm) override {
    if (strategy_ == Strategy::Ddp || strategy_ == Strategy::Zero1) return norm;
    std::vector<double> all(size_t(comm_.size()));
    comm_.all_gather(&norm, all.data(), 1, DType::F64);
    double sq = 0;
    for (double x : all) sq += x * x;
    return std::sqrt(sq);
  }

  bool after_backward(Trainer&) override {
    after_backward_ = true;
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!buckets_[b].reduced) reduce_bucket(int(b));  // parameters that got no gradient this step
    after_backward_ = false;
    while (!in_flight_.empty()) retire();  // the optimizer reads the reduced gradients
    for (auto& b : buckets_) b.ready = 0, b.reduced = false;
    micro_ = 0;
    return true;
  }

  void after_step(Trainer&, bool applied) override {
    if (strategy_ == Strategy::Ddp) return;
    for (size_t i = 0; i < params_.size(); ++i)  // the optimizer cleared its own shard's
      if (owner_[i] != comm_.rank()) params_[i].set_grad(Tensor());
    if (units_) units_->release_all();  // the next forward gathers the updated shards
    if (!applied) return;
    for (const Run& r : runs_) {
      const Tensor& first = params_[size_t(r.first)];
      const Tensor& last = params_[size_t(r.last)];
      const int64_t bytes = byte_offset(last) + last.nbytes() - byte_offset(first);
      comm_.broadcast(first.raw_data(), bytes, r.owner, backend_for(device_).native_stream());
    }
  }

 private:
  void make_buckets() {
    int64_t bytes = 0;
    for (int i = int(params_.size()) - 1; i >= 0; --i) {
      const Tensor& p = params_[size_t(i)];
      bool fresh = buckets_.empty() || bytes + p.nbytes() > bucket_bytes_ || i == table_ || buckets_.back().params.back() == table_ ||
                   params_[size_t(buckets_.back().params.back())].dtype() != p.dtype();
      if (fresh) buckets_.emplace_back(), bytes = 0;
      buckets_.back().params.push_back(i);
      bucket_of_.resize(params_.size());
      bucket_of_[size_t(i)] = int(buckets_.size()) - 1;
      bytes += p.nbytes();
    }
  }

  // Owner ranges as runs of one storage with increasing addresses. The bytes between two owned
  // parameters (alignment, frozen parameters, buffers) are identical on every rank, so
  // broadcasting them with the run changes nothing.
  void make_runs() {
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i];
      if (units_ && units_->in_unit(i)) continue;  // fsdp gathers these before each use
      if (!runs_.empty()) {
        Run& r = runs_.back();
        const Tensor& q = params_[size_t(r.last)];
        if (r.owner == owner_[i] && r.last + 1 == int(i) && q.storage() == p.storage() && p.is_contiguous() &&
            byte_offset(p) >= byte_offset(q) + q.nbytes()) {
          r.last = int(i);
          continue;
        }
      }
      runs_.push_back({owner_[i], int(i), int(i)});
    }
  }

  void ready(int i) {
    if (micro_ < k_) return;  // gradients are reduced once, after the last micro-batch's backward
    Bucket& b = buckets_[size_t(bucket_of_[size_t(i)])];
    if (++b.ready == int(b.params.size())) reduce_bucket(bucket_of_[size_t(i)]);
  }

  // The bucket's gradients, packed in one buffer, reduced (mean) to everyone (ddp, zero1) or to
  // each parameter's owner (zero2), then unpacked.
  void reduce_bucket(int index) {
    Bucket& b = buckets_[size_t(index)];
    b.reduced = true;
    std::vector<int> with_grad;
    for (int i : b.params)
      if (params_[size_t(i)].grad().defined()) with_grad.push_back(i);
    if (strategy_ == Strategy::Ddp || strategy_ == Strategy::Zero1) {
      // A bucket filled during backward is reduced beside it (on 2 H200s the copy engines' way
      // was as fast for the last bucket too, which the optimizer waits for: no exception for it).
      reduce_group(with_grad, -1, !after_backward_);
      return;
    }
    for (size_t s = 0; s < with_grad.size();) {  // one reduce per owner, owners are contiguous
      size_t e = s;
      while (e < with_grad.size() && owner_[size_t(with_grad[e])] == owner_[size_t(with_grad[s])]) ++e;
      std::vector<int> group(with_grad.begin() + long(s), with_grad.begin() + long(e));
      const int root = owner_[size_t(with_grad[s])];
      reduce_group(group, root);
      if (root != comm_.rank())
        for (int i : group) {  // ZeRO-2: only the owner keeps it
          record_stream(params_[size_t(i)].grad(), kCommStream);  // reused once the reduction has read it
          params_[size_t(i)].set_grad(Tensor());
        }
      s = e;
    }
  }

  // Whether the tied table's lookup rows of this micro-batch are gathered (all ranks' N rows,
  // W N C values) rather than added locally and reduced with the head's part (V C values): when
  // the ranks' rows are no more than the table's.
  bool gather_rows() const { return tokens_ * comm_.size() <= params_[size_t(table_)].size(0); }

  // The tied table's lookup gradient (ids [N], rows [N, C]), during backward on the compute
  // stream. At the last micro-batch, when gather_rows(), the head's part was reduced as soon as
  // it arrived (the table is a bucket of its own); every rank's rows are then gathered and added
  // on the communication stream after it: the table's gradient is the mean of the head's parts
  // plus the sum of all rows / W, the same on every rank and run to run (rows added in rank
  // order, then position order). That sends W N C values instead of V C at the end of backward
  // (GPT-2, 16 x 1024 tokens per rank: 50 MB instead of 154 MB) and needs no dense [V, C] lookup
  // gradient. Otherwise (an earlier micro-batch, more rows than the table has) the rows are
  // added locally, as the lookup's backward would have, and the table counted ready after them.
  void table_rows(const Tensor& ids, const Tensor& rows, int64_t skip_id) {
    const size_t i = size_t(table_);
    Tensor& p = params_[i];
    const bool head_first = fired_[i] == micro_serial_;
    const bool counted = head_first && gather_rows();  // the head's hook called ready() already
    if (!p.grad().defined()) {
      MemoryCategoryScope g(Category::Gradient);
      Tensor z = Tensor::empty(p.shape(), p.dtype(), p.device());
      backend_for(device_).fill(z, 0.0);
      p.set_grad(z);
    }
    const Bucket& b = buckets_[size_t(bucket_of_[i])];
    const int64_t n = ids.numel(), w = comm_.size();
    if (micro_ < k_ || !counted || !b.reduced) {  // once the head's part is reduced, rows must be gathered
      backend_for(device_).embedding_bwd(p.grad(), rows, ids, skip_id);
      fired_[i] = micro_serial_;
      if (!counted) ready(int(i));
      return;
    }
    Event produced(device_);
    produced.record();
    auto added = std::make_unique<Event>(device_);
    {
      StreamGuard on_comm(kCommStream);
      produced.block_current_stream();
      void* stream = backend_for(device_).native_stream();
      MemoryCategoryScope ws(Category::Workspace);
      Tensor all_ids = Tensor::empty({w * n}, ids.dtype(), ids.device());
      Tensor all_rows = Tensor::empty({w * n, rows.size(1)}, rows.dtype(), rows.device());
      if (all_ids.raw_data()) {  // a plan on meta moves no data
        comm_.all_gather(ids.raw_data(), all_ids.raw_data(), n, ids.dtype(), stream);
        comm_.all_gather(rows.raw_data(), all_rows.raw_data(), rows.numel(), rows.dtype(), stream);
      }
      backend_for(device_).unary(UnaryOp::Scale, all_rows, all_rows, float(1.0 / double(w)));
      backend_for(device_).embedding_bwd(p.grad(), all_rows, all_ids, skip_id);
      record_stream(ids, kCommStream);  // the engine frees them when this returns
      record_stream(rows, kCommStream);
      added->record();
    }
    in_flight_.push_back(std::move(added));
    while (in_flight_.size() > max_in_flight_) retire();
  }

  // The group's gradients, packed into one staging buffer, reduced and unpacked, all on the
  // communication stream after the compute stream's work so far (which produced them): backward
  // goes on meanwhile. The staging buffer comes from, and goes back to, that stream's pool. A
  // group of one contiguous gradient (GPT-2's tied embedding, a bucket of its own) is reduced
  // where it is.
  void reduce_group(const std::vector<int>& group, int root, bool beside_compute = false) {
    if (group.empty()) return;
    const DType dt = params_[size_t(group[0])].grad().dtype();
    int64_t n = 0;
    for (int i : group) n += params_[size_t(i)].grad().numel();
    Event produced(device_);
    produced.record();
    auto reduced = std::make_unique<Event>(device_);
    {
      StreamGuard on_comm(kCommStream);
      produced.block_current_stream();
      void* stream = backend_for(device_).native_stream();
      auto reduce = [&](void* base) {
        if (!base) return;  // a plan on meta moves no data: the buffers' bytes are what it replays
        if (root < 0 && beside_compute) comm_.all_reduce_beside_compute(base, n, dt, ReduceOp::Avg, stream);
        else if (root < 0) comm_.all_reduce(base, n, dt, ReduceOp::Avg, stream);
        else comm_.reduce(base, n, dt, ReduceOp::Avg, root, stream);
      };
      const Tensor& first = params_[size_t(group[0])].grad();
      if (group.size() == 1 && first.is_contiguous()) {
        reduce(first.raw_data());
      } else {
        MemoryCategoryScope ws(Category::Workspace);
        Tensor staging = Tensor::empty({n}, dt, first.device());
        auto flat = [](const Tensor& t) { return make_view(t, {t.numel()}, {1}, t.impl()->offset); };
        int64_t at = 0;
        for (int i : group) {
          const Tensor& g = params_[size_t(i)].grad();
          copy_(make_view(staging, {g.numel()}, {1}, at), flat(g.contiguous()));
          at += g.numel();
        }
        reduce(staging.raw_data());
        if (root < 0 || root == comm_.rank()) {
          at = 0;
          for (int i : group) {
            const Tensor& g = params_[size_t(i)].grad();
            copy_(flat(g), make_view(staging, {g.numel()}, {1}, at));
            at += g.numel();
          }
        }
      }
      reduced->record();
    }
    // The gradients the rank keeps are next freed after after_backward(), whose waits order the
    // compute stream after every reduction: they need no record_stream.
    in_flight_.push_back(std::move(reduced));
    while (in_flight_.size() > max_in_flight_) retire();
  }

  // The compute stream waits for the oldest reduction still in flight.
  void retire() {
    in_flight_.front()->block_current_stream();
    in_flight_.pop_front();
  }

  Communicator& comm_;
  Device device_ = Device::cpu();
  std::deque<std::unique_ptr<Event>> in_flight_;  // reductions enqueued on the communication stream
  const size_t max_in_flight_;  // --buckets-in-flight
  const int64_t bucket_bytes_;   // --bucket-mb
  bool after_backward_ = false;  // inside after_backward(): nothing runs beside the reductions
  Strategy strategy_;
  int64_t k_;
  int64_t micro_ = 0;
  std::vector<Tensor> params_;
  std::vector<int> owner_, bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<Run> runs_;
  std::unique_ptr<FsdpUnits> units_;  // fsdp only
  int table_ = -1;                     // the tied table's index in params_ (ddp, zero1), else -1
  int64_t micro_serial_ = 0;           // micro-batches so far, all steps
  int64_t tokens_ = 0;                 // this rank's input ids in the current micro-batch
  std::vector<int64_t> fired_;         // per parameter: the micro-batch its gradient last arrived in
};

DataParallel* strategy_hook(Trainer& t) {
  for (auto& h : t.hooks())
    if (auto* d = dynamic_cast<DataParallel*>(h.get())) return d;
  return nullptr;
}

// One rank's optimizer state sent to every rank: a header line per tensor (name, dtype, shape),
// then each tensor's bytes. Rank 0 keeps what it receives; the others drop it.
void share_state(Communicator& comm, int from, std::map<std::string, Tensor>& mine, std::map<std::string, Tensor>& into) {
  std::string header;
  std::vector<Tensor> host;
  if (comm.rank() == from)
    for (auto& [name, t] : mine) {
      host.push_back(t.contiguous().to(Device::cpu()));
      header += name + "\t" + std::to_string(int(t.dtype()));
      for (int64_t d : t.shape()) header += "\t" + std::to_string(d);
      header += "\n";
    }
  int64_t size = int64_t(header.size());
  comm.broadcast(&size, sizeof size, from);
  header.resize(size_t(size));
  comm.broadcast(header.data(), size, from);
  size_t at = 0, k = 0;
  while (at < header.size()) {
    const size_t end = header.find('\n', at);
    std::vector<std::string> f;
    for (size_t p = at; p <= end;) {
      size_t q = std::min(header.find('\t', p), end);
      f.push_back(header.substr(p, q - p));
      p = q + 1;
    }
    at = end + 1;
    Shape shape;
    for (size_t i = 2; i < f.size(); ++i) shape.push_back(std::stoll(f[i]));
    Tensor t = comm.rank() == from ? host[k] : Tensor::empty(shape, DType(std::stoi(f[1])), Device::cpu());
    comm.broadcast(t.raw_data(), t.nbytes(), from);
    if (comm.rank() == 0 && from != 0) into[f[0]] = t;
    ++k;
  }
}

}  // namespace

CheckpointGather::CheckpointGather(Trainer& t, bool gather_state) {
  state = t.optimizer().state_dict();
  DataParallel* dp = strategy_hook(t);
  if (!dp || !dp->sharded()) return;  // ddp: every rank has it all already
  if (FsdpUnits* units = dp->units()) {
    if (t.config().lora_rank > 0) {
      units_ = units;
      units_->gather_all();
    } else {
      MemoryCategoryScope other(Category::Other);  // host copies, not part of the run
      const bool writes = world().rank() == 0;
      // A copy always (to_device would hand a CPU run's gathered tensor itself back, keeping it).
      units->visit_gathered([&](const Tensor& p, bool owned) {
        if (!writes || owned) return;
        Tensor host = Tensor::empty(p.shape(), p.dtype(), Device::cpu());
        backend_for(p.device()).copy_to_host(host.raw_data(), p.contiguous());
        host_params.emplace(p.impl(), host);
      });
    }
  }
  if (!gather_state) return;
  Communicator& comm = world();
  std::map<std::string, Tensor> all;
  for (int r = 0; r < comm.size(); ++r) share_state(comm, r, state.tensors, all);
  if (comm.rank() == 0) state.tensors.insert(all.begin(), all.end());
}

CheckpointGather::~CheckpointGather() {
  if (units_) units_->release_all();
}

std::map<std::string, Tensor> owned_state(Trainer& t, std::map<std::string, Tensor> all) {
  DataParallel* dp = strategy_hook(t);
  if (!dp || !dp->sharded()) return all;
  std::set<std::string> mine;
  for (auto& [n, p] : t.optimizer().named_params()) mine.insert(n);
  std::map<std::string, Tensor> out;
  for (auto& [key, v] : all) {  // "<parameter>.<state>"
    const size_t dot = key.rfind('.');
    if (dot != std::string::npos && mine.count(key.substr(0, dot))) out.emplace(key, v);
  }
  return out;
}

std::vector<int> shard_owners(const std::vector<Tensor>& params, int world) {
  int64_t total = 0;
  for (const Tensor& p : params) total += p.nbytes();
  std::vector<int> owner(params.size(), 0);
  int64_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    // The rank whose equal share holds the parameter's middle byte: contiguous, balanced.
    const int64_t mid = at + params[i].nbytes() / 2;
    owner[i] = total > 0 ? int(std::min<int64_t>(world - 1, mid * world / total)) : 0;
    at += params[i].nbytes();
  }
  return owner;
}

std::vector<int> interleaved_owners(const std::vector<Tensor>& params, const std::vector<int>& unit_of, int world) {
  std::vector<int> owner(params.size(), 0);
  std::vector<double> load(size_t(world), 0.0);
  for (size_t i = 0; i < params.size(); ++i)
    if (unit_of[i] >= 0) {
      owner[i] = unit_of[i] % world;
      load[size_t(owner[i])] += 4.0 * double(params[i].nbytes());  // held alone: value, gradient, two moments
    }
  for (size_t i = 0; i < params.size(); ++i)
    if (unit_of[i] < 0) {  // held by every rank: the owner adds its gradient and moments
      owner[i] = int(std::min_element(load.begin(), load.end()) - load.begin());
      load[size_t(owner[i])] += 3.0 * double(params[i].nbytes());
    }
  return owner;
}

std::vector<int> block_units(nn::Module& model, const std::vector<Tensor>& params) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].impl()] = i;
  std::vector<int> unit_of(params.size(), -1);
  int units = 0;
  for (auto& [path, m] : model.named_modules()) {
    if (!nn::is_transformer_block(*m)) continue;
    for (auto& [n, p] : m->named_parameters()) {
      auto it = index.find(p.impl());
      if (it != index.end() && unit_of[it->second] < 0) unit_of[it->second] = units;
    }
    ++units;
  }
  return unit_of;
}

std::optional<DType> fsdp_gather_dtype(const RunConfig& c) {
  const PrecisionPolicy p = precision_policy(c.precision);
  if (!p.compute_dtype || p.low_precision_params() || c.lora_rank > 0 || c.fsdp_gather == FsdpGather::F32)
    return std::nullopt;
  return p.compute_dtype;
}

std::vector<int> owners_for(const RunConfig& cfg, nn::Module& model, const std::vector<Tensor>& params, int world) {
  if (cfg.strategy == StrategyKind::Fsdp) return interleaved_owners(params, block_units(model, params), world);
  return shard_owners(params, world);
}

std::vector<NamedTensor> owned_parameters(const RunConfig& cfg, nn::Module& model, const std::vector<NamedTensor>& named) {
  if (cfg.strategy == StrategyKind::Ddp || world().size() == 1) return named;
  std::vector<Tensor> params;
  for (auto& [n, p] : named) params.push_back(p);
  const std::vector<int> owner = owners_for(cfg, model, params, world().size());
  std::vector<NamedTensor> mine;
  for (size_t i = 0; i < named.size(); ++i)
    if (owner[i] == world().rank()) mine.push_back(named[i]);
  return mine;
}

void install_strategy(Trainer& t) {
  const RunConfig& c = t.config();
  if (world().size() == 1) return;
  // meta: a plan replaying a rank; cuda: NCCL's world (JobSession made it, train/job_session.h).
  if (t.device().is_cuda() && std::string(world().name()) != "nccl")
    throw UsageError("--strategy " + name_of(c.strategy) + " on " + t.device().str() + " with the " + world().name() + " communicator",
                     "CUDA ranks exchange device memory through NCCL", "launch with torchrun or leantrain train --devices N");
  if (c.fused_step)
    throw UsageError("--fused-step with " + std::to_string(world().size()) + " ranks",
                     "a fused step updates parameters inside backward, before their gradients are reduced over the ranks",
                     "drop --fused-step");
  const int64_t k = c.batch / (c.micro_batch ? c.micro_batch : c.batch);
  t.add_hook_first(std::make_unique<DataParallel>(world(), c.strategy, k, size_t(c.buckets_in_flight), c.bucket_mb << 20));
}

}  // namespace lt::dist

