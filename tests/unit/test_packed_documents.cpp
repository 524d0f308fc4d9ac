// Padding-free packing (issue 48): rows of whole documents (DocumentRows) with positions that
// restart per document, and the models attending within each document only. The acceptance test:
// a packed batch's loss and every parameter's gradient equal those of the documents run one by
// one (the per-token losses summed, divided by the batch's target count), in f64 and f32, for
// GPT-2 (learned positions), LLaMA, Qwen3 (q/k norms), Mistral (a sliding window), Gemma 3
// (sliding and global layers) and Qwen3.5 (a Gated DeltaNet layer, whose recurrent state and
// convolution restart per document, then gated attention), also with the chunked loss and with
// activation checkpointing.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "leantrain/checkpoint.h"
#include "leantrain/cuda_info.h"
#include "leantrain/data.h"
#include "leantrain/models.h"
#include "leantrain/ops.h"
#include "leantrain/random.h"
#include "models/llama.h"
#include "unit/error_of.h"
#include "unit/rel_error.h"

using namespace lt;
using lt::test::error_of;
using lt::test::rel_error;

namespace {

constexpr int64_t kV = 50, kT = 16;

// Documents of skewed lengths (1 is too short to have a target: it is left out), each a few ids.
std::vector<std::vector<int32_t>> documents(uint64_t seed, const std::vector<int64_t>& lens) {
  std::vector<std::vector<int32_t>> out;
  for (size_t d = 0; d < lens.size(); ++d) {
    std::vector<int32_t> doc;
    for (int64_t i = 0; i < lens[d]; ++i) doc.push_back(int32_t(rng_mix64(seed * 131 + d * 977 + uint64_t(i)) % kV));
    out.push_back(doc);
  }
  return out;
}
const std::vector<int64_t> kLens = {7, 3, 17, 2, 5, 9, 1, 4, 12, 6, 11, 2};

// The stream of the documents; the first `prompt` tokens of every third document are not
// targets (a prompt/response pair), so masked targets take part too.
std::shared_ptr<TokenStream> stream_of(const std::vector<std::vector<int32_t>>& docs, int64_t prompt) {
  auto s = std::make_shared<TokenStream>(kV);
  for (size_t d = 0; d < docs.size(); ++d) {
    s->start_document();
    const int64_t p = d % 3 == 0 ? std::min<int64_t>(prompt, int64_t(docs[d].size())) : 0;
    s->append(std::span(docs[d]).first(size_t(p)), false);
    s->append(std::span(docs[d]).subspan(size_t(p)), true);
  }
  return s;
}

struct Rows {
  Tensor inputs, targets, doc_pos;
};
Rows batch_of(const Dataset& ds) {
  const int64_t B = ds.size(), T = ds.input_shape()[0];
  std::vector<int64_t> in(size_t(B * T)), tg(size_t(B * T));
  std::vector<int32_t> pos(size_t(B * T));
  for (int64_t r = 0; r < B; ++r) {
    ds.get(r, in.data() + r * T, tg.data() + r * T);
    if (ds.has_doc_pos()) ds.get_doc_pos(r, pos.data() + r * T);
  }
  std::vector<int64_t> p64(pos.begin(), pos.end());
  return {from_ints(in, {B, T}), from_ints(tg, {B, T}), ds.has_doc_pos() ? from_ints(p64, {B, T}, DType::I32) : Tensor()};
}

std::string gpt2_json() {
  return R"({"model_type": "gpt2", "vocab_size": 50, "n_positions": 256, "n_embd": 16, "n_layer": 2, "n_head": 4,
             "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0, "tie_word_embeddings": true})";
}
std::string llama_json(const std::string& type, const std::string& extra = "") {
  return R"({"model_type": ")" + type + R"(", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 24,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
             "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": false)" +
         extra + "}";
}
std::string gemma3_json() {
  return R"({"model_type": "gemma3_text", "vocab_size": 50, "hidden_size": 12, "intermediate_size": 20,
             "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 6,
             "query_pre_attn_scalar": 5, "max_position_embeddings": 256, "sliding_window": 4,
             "sliding_window_pattern": 2, "rms_norm_eps": 1e-6, "tie_word_embeddings": true})";
}

// Qwen3.5: a Gated DeltaNet layer (2 value heads on 1 key head, a 4-tap convolution: documents of
// 1-3 inputs are shorter) then a gated attention layer with partial rotary. The rows of 150 below
// put documents across the delta rule's chunks of 64.
std::string qwen35_json() {
  return R"({"model_type": "qwen3_5_text", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 24,
             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
             "partial_rotary_factor": 0.5, "linear_num_key_heads": 1, "linear_key_head_dim": 6,
             "linear_num_value_heads": 2, "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4,
             "full_attention_interval": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": false})";
}

struct Grads {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;
};

std::shared_ptr<models::Model> build(const std::string& json, DType dt, int64_t loss_chunk, const std::string& ckpt,
                                     Device dev) {
  auto m = models::create_model_from_json(json, nn::InitOptions{.device = dev, .dtype = dt, .seed = 5});
  m->set_loss_chunk(loss_chunk);
  if (!ckpt.empty()) nn::apply_checkpointing(*m, ckpt);
  return m;
}

Grads grads_of(models::Model& m, double loss) {
  Grads r;
  r.loss = loss;
  for (auto& [name, p] : m.named_parameters())
    if (p.grad().defined()) r.grads[name] = p.grad().to_double_vector();
  return r;
}

// How a test takes the loss. Mean: Model::loss (the training loss), times the target count so
// that packed and one-by-one runs compare as sums; its 1/count factor is rounded to f32 by the
// ops, so in f64 the two agree to about 1e-7 only. Sum: the summed cross-entropy of the chunked
// head (chunked_loss_sum, chunks of `chunk` rows), with no factor: f64 agrees to rounding.
enum class Loss { Mean, Sum };

Tensor loss_of(models::Model& m, Loss how, const Tensor& ids, const Tensor& targets, const nn::TokenMask& mask,
               double& value) {
  if (how == Loss::Sum) {
    Tensor l = m.chunked_loss_sum(ids, targets, mask);
    EXPECT_TRUE(l.defined());
    value = l.item();
    return l;
  }
  int64_t count = 0;
  for (double t : targets.to_double_vector()) count += t != double(kIgnoreTarget);
  Tensor l = m.loss(ids, targets, mask);
  value = l.item() * double(count);
  return scale(l, double(count));  // an integer factor: exact
}

// The packed rows' summed loss and its gradients.
Grads packed(const std::string& json, DType dt, const Rows& rows, Loss how, int64_t chunk = 0, const std::string& ckpt = "",
             Device dev = Device::cpu()) {
  auto m = build(json, dt, how == Loss::Sum && chunk == 0 ? 1 << 20 : chunk, ckpt, dev);
  double v = 0;
  loss_of(*m, how, rows.inputs.to(dev), rows.targets.to(dev),
          nn::TokenMask::documents(rows.doc_pos.defined() ? rows.doc_pos.to(dev) : Tensor()), v)
      .backward();
  return grads_of(*m, v);
}

// Each document alone ([1, n - 1] inputs, its own targets): the sum of their summed losses is
// the packed batch's summed loss, and so are the gradients.
Grads one_by_one(const std::string& json, DType dt, const TokenStream& s, Loss how, Device dev = Device::cpu()) {
  auto m = build(json, dt, how == Loss::Sum ? 1 << 20 : 0, "", dev);
  const std::vector<int64_t> starts = s.document_starts();
  double sum = 0;
  for (size_t d = 0; d < starts.size(); ++d) {
    const int64_t b = starts[d], e = d + 1 < starts.size() ? starts[d + 1] : s.size();
    std::vector<int64_t> ids, targets;
    int64_t count = 0;
    for (int64_t i = b; i + 1 < e; ++i) {
      ids.push_back(s[i]);
      targets.push_back(s.is_target(i + 1) ? s[i + 1] : kIgnoreTarget);
      count += s.is_target(i + 1);
    }
    if (count == 0) continue;
    const int64_t n = int64_t(ids.size());
    double v = 0;
    loss_of(*m, how, from_ints(ids, {1, n}, DType::I64, dev), from_ints(targets, {1, n}, DType::I64, dev), {}, v)
        .backward();
    sum += v;
  }
  return grads_of(*m, sum);
}

void expect_same(const Grads& a, const Grads& b, double tol) {
  EXPECT_NEAR(a.loss, b.loss, tol * std::abs(b.loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, g] : b.grads) {
    ASSERT_TRUE(a.grads.count(name)) << name;
    EXPECT_LT(rel_error(a.grads.at(name), g), tol) << name;
  }
}

struct Family {
  const char* name;
  std::string json;
};
std::vector<Family> families() {
  return {{"gpt2", gpt2_json()},
          {"llama", llama_json("llama")},
          {"qwen3", llama_json("qwen3")},
          {"mistral", llama_json("mistral", R"(, "sliding_window": 5)")},
          {"gemma3", gemma3_json()},
          {"qwen3_5", qwen35_json()}};
}

}  // namespace

TEST(DocumentRows, PacksWholeDocumentsBestFitDecreasing) {
  const auto docs = documents(1, {5, 9, 3, 17, 2, 1, 6});
  auto s = stream_of(docs, 0);
  DocumentRows rows(s, 8, Packing::Docs);
  // Inputs per document: 4, 8, 2, 16 (a full piece of 8 and a last one of 8), 1, -, 5. The full
  // piece is a row; the rest best-fit decreasing: 8 | 8 | 5 + 2 + 1 | 4.
  EXPECT_EQ(rows.documents(), 6);
  ASSERT_EQ(rows.size(), 5);
  EXPECT_EQ(rows.text_tokens(), 4 + 8 + 2 + 16 + 1 + 5);
  std::vector<int64_t> real;
  for (int64_t r = 0; r < rows.size(); ++r) real.push_back(rows.real_tokens(r));
  EXPECT_EQ(real, (std::vector<int64_t>{8, 8, 8, 8, 4}));
  // Row 3 holds the documents of 6, 3 and 2 tokens: positions restart at each.
  std::vector<int64_t> in(8), tg(8);
  std::vector<int32_t> pos(8);
  rows.get(3, in.data(), tg.data());
  rows.get_doc_pos(3, pos.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 0}));
  const std::vector<int32_t>& d6 = docs[6];
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(in[size_t(j)], d6[size_t(j)]);
    EXPECT_EQ(tg[size_t(j)], d6[size_t(j + 1)]);
  }
  EXPECT_EQ(in[5], docs[2][0]);
  EXPECT_EQ(tg[6], docs[2][2]);  // a document's last target is its own last token
  // The last row: a 5-token document (4 inputs) and padding, a "document" of its own.
  rows.get(4, in.data(), tg.data());
  rows.get_doc_pos(4, pos.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  for (int j = 4; j < 8; ++j) {
    EXPECT_EQ(tg[size_t(j)], kIgnoreTarget);
    EXPECT_EQ(in[size_t(j)], 0);
  }
  // A piece of the long document: its last target is the next piece's first input.
  rows.get(0, in.data(), tg.data());
  EXPECT_EQ(tg[7], docs[3][8]);
  EXPECT_TRUE(rows.has_doc_pos());
}

TEST(DocumentRows, NoneIsOneDocumentPerRowAndMasksPromptsAndPadding) {
  const auto docs = documents(2, {4, 6, 3});
  auto s = stream_of(docs, 2);  // document 0's first two tokens are a prompt
  DocumentRows rows(s, 8, Packing::None);
  ASSERT_EQ(rows.size(), 3);
  EXPECT_FALSE(rows.has_doc_pos());
  std::vector<int64_t> in(8), tg(8);
  rows.get(0, in.data(), tg.data());
  // Inputs t0 t1 t2, targets t1 (prompt: masked) t2 t3, then padding.
  EXPECT_EQ(tg, (std::vector<int64_t>{kIgnoreTarget, docs[0][2], docs[0][3], kIgnoreTarget, kIgnoreTarget, kIgnoreTarget,
                                      kIgnoreTarget, kIgnoreTarget}));
  EXPECT_EQ(rows.real_tokens(0), 3);
  EXPECT_EQ(rows.real_tokens(1), 5);
}

TEST(DocumentRows, AStreamWithoutMarksIsOneDocumentCutLikeWindows) {
  auto s = std::make_shared<TokenStream>(kV);
  std::vector<int32_t> ids;
  for (int i = 0; i < 35; ++i) ids.push_back(i % kV);
  s->append(ids);
  DocumentRows rows(s, 8, Packing::Docs);
  TokenWindows windows(s, 8);
  ASSERT_EQ(windows.size(), 4);
  ASSERT_EQ(rows.size(), 5);  // the four windows, and the last 2 inputs padded
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int64_t> a(8), at(8), b(8), bt(8);
    rows.get(r, a.data(), at.data());
    windows.get(r, b.data(), bt.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(at, bt);
  }
}

TEST(DocumentRows, RefusesConcatAndBadLengths) {
  auto s = stream_of(documents(3, {4, 5}), 0);
  EXPECT_NE(error_of([&] { DocumentRows(s, 8, Packing::Concat); }).find("TokenWindows"), std::string::npos);
  EXPECT_NE(error_of([&] { DocumentRows(s, 0, Packing::Docs); }).find("out of range"), std::string::npos);
}

TEST(PackedDocuments, LossAndGradientsEqualEachDocumentAloneF64) {
  const auto docs = documents(7, kLens);
  auto s = stream_of(docs, 2);
  const Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  ASSERT_GT(rows.inputs.size(0), 1);
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum), one_by_one(f.json, DType::F64, *s, Loss::Sum), 1e-10);
    // The training loss (a mean): its f32-rounded 1/count is the only difference.
    expect_same(packed(f.json, DType::F64, rows, Loss::Mean), one_by_one(f.json, DType::F64, *s, Loss::Mean), 1e-6);
  }
  // Rows of 150: documents across the CPU kernel's 64-query blocks.
  auto ls = stream_of(documents(14, {120, 3, 40, 97, 1, 64, 29, 8, 33, 71, 5}), 4);
  const Rows long_rows = batch_of(DocumentRows(ls, 150, Packing::Docs));
  for (const Family& f : families()) {
    SCOPED_TRACE(std::string(f.name) + " T 150");
    expect_same(packed(f.json, DType::F64, long_rows, Loss::Sum), one_by_one(f.json, DType::F64, *ls, Loss::Sum), 1e-10);
  }
}

TEST(PackedDocuments, LossAndGradientsEqualEachDocumentAloneF32) {
  const auto docs = documents(8, kLens);
  auto s = stream_of(docs, 2);
  const Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    expect_same(packed(f.json, DType::F32, rows, Loss::Mean), one_by_one(f.json, DType::F32, *s, Loss::Mean), 2e-4);
    expect_same(packed(f.json, DType::F32, rows, Loss::Sum), one_by_one(f.json, DType::F32, *s, Loss::Sum), 2e-4);
  }
}

TEST(PackedDocuments, ChunkedLossAndCheckpointingKeepTheDocumentsApart) {
  const auto docs = documents(9, kLens);
  auto s = stream_of(docs, 0);
  const Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    const Grads alone = one_by_one(f.json, DType::F64, *s, Loss::Sum);
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum, /*chunk=*/7), alone, 1e-10);
    // A checkpointed block recomputes its forward in the backward: with the same documents.
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum, 0, "blocks"), alone, 1e-10);
  }
}

// The mixtures of experts (issue 45's Qwen3-MoE and Mixtral) attend as the LLaMA family does:
// packed documents, chunked or checkpointed, give each document's loss and gradients alone
// (routing is per token; the load-balancing loss, off here, pools the batch by design).
TEST(PackedDocuments, MixturesOfExpertsKeepTheDocumentsApart) {
  const std::string moe = R"(, "moe_intermediate_size": 8, "num_experts": 4, "num_experts_per_tok": 2,
                              "norm_topk_prob": true, "decoder_sparse_step": 1)";
  const std::vector<Family> fams{{"qwen3_moe", llama_json("qwen3_moe", moe)},
                                 {"mixtral", llama_json("mixtral", R"(, "num_local_experts": 4, "num_experts_per_tok": 2)")}};
  const auto docs = documents(15, kLens);
  auto s = stream_of(docs, 2);
  const Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  for (const Family& f : fams) {
    SCOPED_TRACE(f.name);
    const Grads alone = one_by_one(f.json, DType::F64, *s, Loss::Sum);
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum), alone, 1e-10);
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum, /*chunk=*/7), alone, 1e-10);
    expect_same(packed(f.json, DType::F64, rows, Loss::Sum, 0, "blocks"), alone, 1e-10);
    expect_same(packed(f.json, DType::F64, rows, Loss::Mean), one_by_one(f.json, DType::F64, *s, Loss::Mean), 1e-6);
  }
}

TEST(PackedDocuments, WithoutDocumentPositionsTheDocumentsSeeEachOther) {
  // The same rows attended across their documents (concat's semantics) give another loss: the
  // test above would catch a mask that does not reach the kernels.
  const auto docs = documents(10, kLens);
  auto s = stream_of(docs, 0);
  Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  const std::string json = llama_json("llama");
  const double with = packed(json, DType::F64, rows, Loss::Sum).loss;
  rows.doc_pos = Tensor();
  EXPECT_GT(std::abs(packed(json, DType::F64, rows, Loss::Sum).loss - with), 1e-6);
}

TEST(PackedDocuments, OneLineErrors) {
  auto m = models::create_model_from_json(llama_json("llama"), nn::InitOptions{.seed = 1});
  Tensor ids = from_ints(std::vector<int64_t>(8, 1), {2, 4});
  EXPECT_NE(error_of([&] { m->forward(ids, nn::TokenMask::documents(from_ints({0, 1, 2, 3}, {1, 4}, DType::I32))); })
                .find("expected i32 [2, 4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m->forward(ids, nn::TokenMask::documents(from_ints(std::vector<int64_t>(8, 0), {2, 4}))); })
                .find("i64"),
            std::string::npos);
  // A document that does not start at 0 (checked on the CPU by the attention op).
  EXPECT_NE(error_of([&] {
              m->forward(ids, nn::TokenMask::documents(from_ints({0, 1, 2, 3, 1, 2, 0, 1}, {2, 4}, DType::I32)));
            }).find("doc_pos[1, 0]"),
            std::string::npos);
  auto* lm = dynamic_cast<models::Llama*>(m.get());
  ASSERT_NE(lm, nullptr);
  EXPECT_NE(error_of([&] {
              lm->hidden_states(ids, nn::TokenMask::documents(from_ints(std::vector<int64_t>(8, 0), {2, 4}, DType::I32)), 3);
            }).find("position offset"),
            std::string::npos);
  auto vit = models::create_model("vit-tiny", nn::InitOptions{.seed = 1});
  EXPECT_NE(error_of([&] {
              vit->forward(zeros({1, 1, 28, 28}), nn::TokenMask::documents(from_ints({0}, {1, 1}, DType::I32)));
            }).find("mask"),
            std::string::npos);
}

TEST(PackedDocuments, LoaderBatchesCarryDocumentPositionsAndTextTokens) {
  const auto docs = documents(11, kLens);
  auto s = stream_of(docs, 0);
  auto rows = std::make_shared<DocumentRows>(s, kT, Packing::Docs);
  const Rows whole = batch_of(*rows);
  std::vector<std::vector<double>> seen;
  for (int workers : {1, 3}) {
    LoaderOptions lo;
    lo.batch_size = 2;
    lo.shuffle = false;
    lo.workers = workers;
    DataLoader loader(rows, lo);
    Batch b = loader.next();
    ASSERT_TRUE(b.doc_pos.defined());
    EXPECT_EQ(b.doc_pos.dtype(), DType::I32);
    EXPECT_EQ(b.doc_pos.shape(), Shape({2, kT}));
    EXPECT_EQ(b.doc_pos.to_double_vector(), slice(whole.doc_pos, 0, 0, 2).to_double_vector());
    EXPECT_EQ(b.row_tokens, (std::vector<int64_t>{rows->real_tokens(0), rows->real_tokens(1)}));
    seen.push_back(b.targets.to_double_vector());
  }
  EXPECT_EQ(seen[0], seen[1]);
  // With text_mask (an MoE's load-balancing loss): each row's first real_tokens inputs are 1.
  {
    const int64_t n = rows->size();
    LoaderOptions lo;
    lo.batch_size = n;
    lo.shuffle = false;
    lo.text_mask = true;
    DataLoader loader(rows, lo);
    Batch b = loader.next();
    ASSERT_TRUE(b.text_mask.defined());
    EXPECT_EQ(b.text_mask.dtype(), DType::U8);
    EXPECT_EQ(b.text_mask.shape(), Shape({n, kT}));
    std::vector<double> want;
    int64_t padding = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t t = 0; t < kT; ++t) {
        want.push_back(t < rows->real_tokens(r) ? 1 : 0);
        padding += t >= rows->real_tokens(r);
      }
    EXPECT_EQ(b.text_mask.to_double_vector(), want);
    EXPECT_GT(padding, 0);  // some padding to leave out
  }
  // Windows count every position, and no document positions.
  LoaderOptions lo;
  lo.batch_size = 2;
  DataLoader windows(std::make_shared<TokenWindows>(s, 8), lo);
  Batch w = windows.next();
  EXPECT_FALSE(w.doc_pos.defined());
  EXPECT_TRUE(w.row_tokens.empty());
}

// On a GPU (the lead's machine; skipped here): the packed batch's loss and gradients equal each
// document run alone there too (f32), and the CPU's.
TEST(PackedDocuments, CudaEqualsEachDocumentAloneAndTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const auto docs = documents(12, kLens);
  auto s = stream_of(docs, 2);
  const Rows rows = batch_of(DocumentRows(s, kT, Packing::Docs));
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    const Device gpu_dev = Device::cuda(0);
    const Grads gpu = packed(f.json, DType::F32, rows, Loss::Mean, 0, "", gpu_dev);
    expect_same(gpu, one_by_one(f.json, DType::F32, *s, Loss::Mean, gpu_dev), 2e-4);
    expect_same(gpu, packed(f.json, DType::F32, rows, Loss::Mean), 2e-4);
    expect_same(packed(f.json, DType::F32, rows, Loss::Sum, 5, "blocks", gpu_dev),
                packed(f.json, DType::F32, rows, Loss::Sum), 2e-4);
    // bf16 parameters on the GPU against the f32 CPU run (bf16 rounding: a loose bound).
    expect_same(packed(f.json, DType::BF16, rows, Loss::Mean, 0, "", gpu_dev), packed(f.json, DType::F32, rows, Loss::Mean),
                0.1);
  }
  // Rows of 192 with documents up to 150 tokens: several key tiles per document, tiles skipped
  // between documents.
  const auto long_docs = documents(13, {150, 3, 40, 97, 1, 64, 120, 8, 33, 71, 129, 5});
  auto ls = stream_of(long_docs, 4);
  const Rows long_rows = batch_of(DocumentRows(ls, 192, Packing::Docs));
  for (const Family& f : families()) {
    SCOPED_TRACE(std::string(f.name) + " T 192");
    const Grads gpu = packed(f.json, DType::F32, long_rows, Loss::Mean, 0, "", Device::cuda(0));
    expect_same(gpu, one_by_one(f.json, DType::F32, *ls, Loss::Mean, Device::cuda(0)), 5e-4);
    expect_same(gpu, packed(f.json, DType::F32, long_rows, Loss::Mean), 5e-4);
  }
}
