// Data: Fashion-MNIST (IDX files), tokenized text corpora (fortunes, text files, JSON lines), and a
// DataLoader that shuffles per epoch from a seed, prepares host batches on worker threads and
// materialises them on the target device inside MemoryCategoryScope(Category::Input).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "leantrain/choices.h"
#include "leantrain/tensor.h"

namespace lt {

class Event;  // backend/event.h

// ---- Fashion-MNIST / IDX ----

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";  // Debian dataset-fashion-mnist
// Mean and std of x/255 over the Fashion-MNIST training images.
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;

// An IDX array of unsigned bytes (the only element type MNIST-style files use).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
// Reads a gzipped (or plain) IDX file. Throws lt::Error naming the file when it is missing,
// not gzip/IDX (bad magic), has `expect_ndims` != its rank, is truncated, or has trailing bytes.
IdxArray read_idx(const std::string& path, int expect_ndims);

// Labelled images kept as raw bytes; batches normalise them.
struct ImageSet {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols
  std::vector<uint8_t> labels;  // count
};
// An image file [N, R, C] and its label file [N]; throws when the counts differ.
ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path);

enum class Split { Train, Test };
// train-images-idx3-ubyte.gz / t10k-... from `dir`. A missing directory or file names the package
// (apt-get install dataset-fashion-mnist); labels must be 0..9.
ImageSet load_fashion_mnist(Split split, const std::string& dir = kFashionMnistDir);

// ---- text ----

namespace text { class Tokenizer; }  // src/text/tokenizer.h

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";  // Debian package `fortunes`

// The token ids of one split, each stored in the fewest bytes its vocabulary needs (1 byte for
// the byte tokenizer's 256 ids, so byte-level corpora take the memory they always took; 2 below
// 65,536 ids; else 4), with a flag per token saying whether it is a target of the loss (the
// prompt of a prompt/response document is not). The flags take memory only once one is off.
// Where each document starts is kept too (one int64 per document), for packing.
class TokenStream {
 public:
  explicit TokenStream(int64_t vocab_size = 256);
  // The next token appended starts a document. A stream with no marks is one document.
  void start_document();
  // The first token of each document, ascending (0 first when any document was marked).
  std::vector<int64_t> document_starts() const;
  void append(std::span<const int32_t> ids, bool target = true);
  // ids with one flag each (1: a target of the loss), e.g. a conversation's assistant mask.
  void append(std::span<const int32_t> ids, std::span<const uint8_t> targets);
  void append_bytes(std::string_view bytes, bool target = true);  // byte values as ids (width 1)
  // Tokens [begin, end) of `other` (which has this stream's width).
  void append(const TokenStream& other, int64_t begin, int64_t end);
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t operator[](int64_t i) const;
  bool is_target(int64_t i) const { return not_target_.empty() || !not_target_[size_t(i)]; }
  bool any_masked() const { return !not_target_.empty(); }
  int bytes_per_token() const { return width_; }
  // Ids [begin, begin + n) as int64 (a batch row).
  void read(int64_t begin, int64_t n, int64_t* out) const;
  std::vector<int32_t> ids() const;  // all of them (tests, small streams)

 private:
  void mark(int64_t n, bool target);  // flags for the last n tokens appended
  int width_ = 1;
  int64_t vocab_ = 256, size_ = 0;
  std::vector<uint8_t> data_;        // size_ * width_ bytes, little-endian ids
  std::vector<uint8_t> not_target_;  // empty, or one flag per token
  std::vector<int64_t> starts_;      // document starts marked by start_document()
};

// Training and validation tokens of a text corpus. Every document is encoded on its own with the
// tokenizer's special tokens (BOS when it adds one) and followed by EOS when it has one;
// documents are concatenated in file and line order.
struct TokenCorpus {
  TokenStream train, val;
  int64_t documents = 0;
  explicit TokenCorpus(int64_t vocab_size = 256) : train(vocab_size), val(vocab_size) {}
};

namespace text { class ChatTemplate; }  // src/text/chat_template.h

struct TextOptions {
  double val_fraction = 0.1;
  // .jsonl lines: a "text" field, or these two (the prompt's tokens are masked from the loss).
  std::string prompt_field = "prompt", response_field = "response";
  int workers = 1;  // threads that tokenize (the result is the same for any count)
  // Conversations ({"messages": [...]} lines) are rendered by the template this returns (asked
  // once, at the first conversation, on the caller's thread; it throws the one-line error of a
  // run without one; empty: conversations are refused), their loss on `train_on`'s tokens.
  // train_on All also makes a prompt/response pair's prompt a target.
  std::function<std::shared_ptr<const text::ChatTemplate>()> chat_template;
  TrainOn train_on = TrainOn::Assistant;
};

// The entries of a fortune file: text between lines that contain only "%" (empty entries dropped).
std::vector<std::string> parse_fortunes(const std::string& text);
// Every fortune file in `dir` (skipping *.dat, *.u8, hidden files and subdirectories), in name
// order; each entry is a document. A tokenizer without EOS reads each entry followed by a "%\n"
// line, as the files write them. Every round(1/val_fraction)-th entry goes to validation, so both
// splits sample every file.
TokenCorpus load_fortunes(const text::Tokenizer& tok, const TextOptions& opt = {},
                          const std::string& dir = kFortunesDir);
// A file, or every regular file of a directory (name order, hidden files skipped). A text file is
// one document, the last val_fraction of its tokens validation. A .jsonl file holds one document
// per line (a JSON object with a string "text" field, or string prompt and response fields; blank
// lines skipped; without EOS a "\n" follows each), every round(1/val_fraction)-th to validation.
// A bad line is an lt::Error naming file:line.
TokenCorpus load_text(const std::string& path, const text::Tokenizer& tok, const TextOptions& opt = {});

// ---- datasets ----

// A random-access collection of (input, target) samples. get() must be thread-safe (const, no
// shared mutable state): the loader's worker threads call it concurrently.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape input_shape() const = 0;  // one sample
  virtual DType input_dtype() const = 0;  // F32 or I64
  virtual Shape target_shape() const = 0;  // {} for a class label; targets are i64
  // Writes sample i: numel(input_shape) values of input_dtype at `input`, numel(target_shape) at `target`.
  virtual void get(int64_t i, void* input, int64_t* target) const = 0;
  // f32 values per sample that ride with the batch (Batch::aux [B, aux_size()]), staged and copied
  // like the targets: a preference pair's reference log-probabilities. 0 (the default): none.
  virtual int64_t aux_size() const { return 0; }
  virtual void get_aux(int64_t i, float* aux) const {}
  // Rows of packed documents (Packing::Docs): each sample also has one i32 per input token, its
  // position inside its document (0 at each document start), which the model's attention and
  // positions take (nn::TokenMask::doc_pos). get_doc_pos writes them; thread-safe like get().
  virtual bool has_doc_pos() const { return false; }
  virtual void get_doc_pos(int64_t i, int32_t* out) const { (void)i, (void)out; }
  // Input tokens of sample i that are text, not padding (for tokens per second); -1: all of them.
  virtual int64_t real_tokens(int64_t i) const { (void)i; return -1; }
};

// Images [1, R, C] as f32 (x/255 - mean)/std, target the class label.
class ImageDataset : public Dataset {
 public:
  explicit ImageDataset(std::shared_ptr<const ImageSet> set, float mean = kFashionMnistMean,
                        float std = kFashionMnistStd);
  int64_t size() const override { return set_->count; }
  Shape input_shape() const override { return {1, set_->rows, set_->cols}; }
  DType input_dtype() const override { return DType::F32; }
  Shape target_shape() const override { return {}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  std::shared_ptr<const ImageSet> set_;
  float mean_, std_;
};

// The target of a token the loss leaves out (cross_entropy's default ignore_index, as in PyTorch).
inline constexpr int64_t kIgnoreTarget = -100;

// Windows of seq_len tokens starting every `stride` tokens (default seq_len: no overlap);
// targets are the same window shifted by one (next-token prediction), -100 (the loss's
// ignore_index) where the stream says a token is not a target.
class TokenWindows : public Dataset {
 public:
  TokenWindows(std::shared_ptr<const TokenStream> tokens, int64_t seq_len, int64_t stride = 0);
  int64_t size() const override { return count_; }
  Shape input_shape() const override { return {seq_len_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {seq_len_}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  std::shared_ptr<const TokenStream> tokens_;
  int64_t seq_len_, stride_, count_;
};

// Rows of whole documents (Packing::None and Packing::Docs), from a stream's document starts. A
// document of n tokens takes n - 1 input positions (its last token is only a target) and its
// targets are its own next tokens, so its loss in a row is its loss run alone. A document longer
// than a row is cut into pieces of seq_len inputs (each piece's targets run one token past it, as
// TokenWindows' do; positions restart at 0 in each piece); what is left of it is placed like a
// short document. None: one document (or piece) per row. Docs: rows filled best-fit decreasing
// (the longest first, each into the fullest row it fits), each token's position inside its
// document in get_doc_pos, so attention stays inside the document. The rest of a row is padding:
// id `pad_id`, target -100, its own "document" (it attends to nothing before it).
class DocumentRows : public Dataset {
 public:
  DocumentRows(std::shared_ptr<const TokenStream> tokens, int64_t seq_len, Packing packing, int32_t pad_id = 0);
  int64_t size() const override { return int64_t(row_begin_.size()) - 1; }
  Shape input_shape() const override { return {seq_len_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {seq_len_}; }
  void get(int64_t i, void* input, int64_t* target) const override;
  bool has_doc_pos() const override { return packing_ == Packing::Docs; }
  void get_doc_pos(int64_t i, int32_t* out) const override;
  int64_t real_tokens(int64_t i) const override;
  int64_t documents() const { return documents_; }  // with at least one target
  int64_t text_tokens() const { return text_tokens_; }  // input positions holding text, all rows

 private:
  struct Segment {
    int64_t begin;  // its first input token in the stream; its targets are tokens begin + 1 ...
    int32_t len;    // input positions (targets too)
  };
  std::shared_ptr<const TokenStream> tokens_;
  int64_t seq_len_;
  Packing packing_;
  int32_t pad_id_;
  std::vector<Segment> segments_;   // row r is segments_[row_begin_[r], row_begin_[r + 1])
  std::vector<int64_t> row_begin_;
  int64_t documents_ = 0, text_tokens_ = 0;
};

// ---- labelled text (sequence classification) ----

// Texts with one class each, tokenized with the tokenizer's special tokens ([CLS] ... [SEP],
// <s> ... </s>) and cut to at most max_len ids (a trailing special token is kept), split into
// training and validation samples: every round(1/val_fraction)-th text of each class validates.
struct TextClasses {
  struct Split {
    std::vector<int32_t> ids;              // every text's ids, back to back
    std::vector<int64_t> offsets{0};       // text i is ids[offsets[i], offsets[i + 1])
    std::vector<int64_t> labels;
    int64_t size() const { return int64_t(labels.size()); }
    void add(std::span<const int32_t> text_ids, int64_t label);
  };
  std::vector<std::string> classes;  // label i names classes[i]
  Split train, val;
  int64_t truncated = 0;  // texts cut to max_len
};
// --data fortunes for a classifier: each fortune file (as load_fortunes lists them) is a class
// named after it, each entry a text.
TextClasses load_fortune_classes(const text::Tokenizer& tok, int64_t max_len, const TextOptions& opt = {},
                                 const std::string& dir = kFortunesDir);
// A .jsonl file, one {"text": "...", "label": ...} per line (labels all integers 0..n-1, or all
// strings, classes then in sorted order), or a directory with one text file per class (the file
// name without its extension names the class; each non-blank line is a text). Errors name file:line.
TextClasses load_text_classes(const std::string& path, const text::Tokenizer& tok, int64_t max_len,
                              const TextOptions& opt = {});

// One split's texts as [seq_len] i64 ids right-padded with pad_id, the target its label. The
// constructor refuses a text holding pad_id itself (it would be read as padding).
class SequenceDataset : public Dataset {
 public:
  SequenceDataset(std::shared_ptr<const TextClasses> data, bool validation, int64_t seq_len, int64_t pad_id);
  int64_t size() const override { return split().size(); }
  Shape input_shape() const override { return {seq_len_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  const TextClasses::Split& split() const { return validation_ ? data_->val : data_->train; }
  std::shared_ptr<const TextClasses> data_;
  bool validation_;
  int64_t seq_len_, pad_id_;
};

// ---- preference pairs (--objective dpo) ----

// A prompt and two completions of it, the first preferred, tokenized: the prompt as a document's
// start (with the tokenizer's special tokens, BOS when it adds one), each completion without them
// and followed by EOS (by "\n" for a tokenizer without one, as a .jsonl document is).
struct PreferencePairs {
  struct Split {
    std::vector<int32_t> ids;         // every pair's prompt, chosen and rejected ids, back to back
    std::vector<int64_t> offsets{0};  // pair i: prompt ids[o[3i], o[3i+1]), chosen to o[3i+2], rejected to o[3i+3]
    int64_t size() const { return int64_t(offsets.size() - 1) / 3; }
    void add(std::span<const int32_t> prompt, std::span<const int32_t> chosen, std::span<const int32_t> rejected);
  };
  Split train, val;
  int64_t truncated = 0;  // completions cut to fit the context
};

namespace text { class ChatTemplate; }  // src/text/chat_template.h

struct PairOptions {
  std::string prompt_field = "prompt", chosen_field = "chosen", rejected_field = "rejected";
  // Conversational pairs (fields that are lists of messages) are rendered by this template; it is
  // asked for at the first such line, so string-only data never needs one. Empty: refused.
  std::function<const text::ChatTemplate&()> chat_template;
  int64_t seq_len = 128;      // a prompt and its completion share seq_len + 1 tokens (the last is only a target)
  double val_fraction = 0.1;  // every round(1 / val_fraction)-th pair validates
  int workers = 1;            // threads that tokenize (the result is the same for any count)
};

// A .jsonl file, or every .jsonl file of a directory (name order), one pair per line with string
// prompt, chosen and rejected fields (blank lines skipped), or conversational ones as TRL reads
// them: chosen and rejected lists of messages, with the prompt a list of messages too or left out
// (then the messages the two share at their start); rendered by the chat template (the prompt
// with the generation prompt, each completion as the rest of prompt + completion's rendering),
// tokenized without special tokens and with no EOS added (the template ends the turn). A completion longer than the context
// leaves is cut at its end (TRL's keep_start); a prompt that leaves no room for one completion
// token, an empty completion, a missing or non-string field and a line of SFT data are each an
// lt::Error naming file:line.
PreferencePairs load_preference_pairs(const std::string& path, const text::Tokenizer& tok, const PairOptions& opt);

// One split's pairs: sample i is inputs i64 [2, T] (row 0 the prompt and chosen completion, row 1
// the prompt and rejected one, right-padded with pad_id), targets i64 [2, T] (the next token
// where it is a completion token, else -100: prompt and padding are out of the log-probability),
// and aux f32 [4]: the reference log-probabilities of chosen and rejected (0 until
// set_reference) and the two completions' target counts. Right padding changes nothing the
// causal model computes for the real tokens.
class PairDataset : public Dataset {
 public:
  PairDataset(std::shared_ptr<const PreferencePairs> data, bool validation, int64_t seq_len, int64_t pad_id = 0);
  int64_t size() const override { return split().size(); }
  Shape input_shape() const override { return {2, seq_len_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {2, seq_len_}; }
  void get(int64_t i, void* input, int64_t* target) const override;
  int64_t aux_size() const override { return 4; }
  void get_aux(int64_t i, float* aux) const override;
  // Pair i's reference log-probabilities at [2i] (chosen) and [2i + 1] (rejected). Set before a
  // loader reads the dataset (its workers read it without a lock).
  void set_reference(std::vector<float> logps);
  const std::vector<float>& reference() const { return reference_; }
  // The number of targets of pair i's chosen (k = 0) or rejected (k = 1) row.
  int64_t targets_of(int64_t i, int k) const;

 private:
  const PreferencePairs::Split& split() const { return validation_ ? data_->val : data_->train; }
  std::shared_ptr<const PreferencePairs> data_;
  bool validation_;
  int64_t seq_len_, pad_id_;
  std::vector<float> reference_;
};

// ---- loader ----

// The default number of loader threads: min(8, hardware threads - 1), at least 1 (one core is
// left to the training loop, which launches the device work).
int default_loader_workers();

struct LoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // true: every batch has batch_size samples
  int prefetch = 2;        // host batches prepared ahead by the worker threads; 0: on the caller's thread
  int workers = 1;         // threads building them; each batch is split among them (same batches for any count)
  Device device = Device::cpu();
  // Stage batches in pinned host memory and copy them to a CUDA device asynchronously (falls back
  // to pageable memory and a synchronous copy, with one warning, when pinned memory is refused).
  // false: pageable memory, synchronous copy. Batches and device allocations are the same either way.
  bool pin_memory = true;
};

struct Batch {
  Tensor inputs;   // [B, ...input_shape]
  Tensor targets;  // [B, ...target_shape], i64
  Tensor aux;      // [B, aux_size] f32 when the dataset has aux values (Dataset::aux_size), else undefined
  Tensor doc_pos;  // i32 [B, ...input_shape] when the dataset packs documents (has_doc_pos), else undefined
  // Per row, the input tokens that are text (Dataset::real_tokens); empty when every input counts.
  std::vector<int64_t> row_tokens;
  int64_t epoch = 0, index = 0;  // index: batch number within the epoch
};

// Batches in a deterministic order: epoch e visits samples in epoch_order(e) (a pure function of
// seed and e), so resuming at batch k of epoch e is seek(e, k), which costs one permutation.
// The content of a batch is the same for any number of workers and any prefetch depth: workers
// write disjoint rows of it, and batches are handed out in order.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const { return batches_; }
  const Dataset& dataset() const { return *ds_; }
  // The position of the next batch.
  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }
  void seek(int64_t epoch, int64_t index = 0);
  void seek_step(int64_t step) { seek(step / batches_, step % batches_); }  // step: global batch number

  // The batch at the current position, on the target device; then moves on (past the last batch
  // of an epoch to the first of the next). Device tensors are allocated here, on the caller's
  // thread, so device allocations happen in program order whatever the workers do. On CUDA the
  // copy into them is enqueued on the compute stream and may still be running on return
  // (kernels on that stream, and copies back to the host, are ordered after it).
  Batch next();
  // Whether batches are staged in pinned memory (known after the first next()).
  bool pinned() const { return pinned_; }
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // A host batch: rows of one staging buffer.
  struct HostBatch {
    uint8_t* inputs = nullptr;   // raw values of input_dtype
    int64_t* targets = nullptr;
    float* aux = nullptr;        // Dataset::aux_size() values per row, when it has any
    int32_t* doc_pos = nullptr;  // has_doc_pos() datasets only
    int buffer = -1;             // index in buffers_
    int64_t size = 0, epoch = 0, index = 0;
    std::vector<int64_t> row_tokens;  // Dataset::real_tokens of each row (when the dataset counts them)
  };

 private:
  // A staging buffer, big enough for a full batch's inputs and targets. Allocated by the caller's
  // thread before any worker starts and kept until the loader is destroyed. A buffer is in exactly
  // one place: spare_, a slot (workers write it), the caller's hands, or inflight_ (the GPU may be
  // reading it); it goes back to spare_ only after its copy event completed.
  struct Buffer {
    uint8_t* mem = nullptr;
    std::shared_ptr<Storage> pinned;  // from allocate_pinned_host (Category::Input); null: pageable (operator new)
    std::shared_ptr<Event> event;     // recorded after its copies (staged buffers only)
  };
  // A batch being built: its rows are cut into chunks that workers claim one at a time.
  struct Slot {
    HostBatch h;
    std::shared_ptr<const std::vector<int64_t>> order;  // of h.epoch
    int64_t chunk_rows = 0, chunks = 0, claimed = 0, done = 0;
  };
  void fill_rows(HostBatch& h, const std::vector<int64_t>& order, int64_t r0, int64_t r1) const;
  void count_tokens(HostBatch& h, const std::vector<int64_t>& order) const;
  void shape_host_batch(HostBatch& h, int buffer, int64_t epoch, int64_t index) const;
  void ensure_buffers();                 // caller's thread
  void free_buffers() noexcept;          // no worker running
  void reclaim(size_t keep);             // caller's thread: done copies' buffers back to spare_,
                                         // waiting for the oldest while more than `keep` are in flight
  void release(int buffer);              // to spare_, waking the workers
  void to_device(const HostBatch& h, Batch& out);
  void open_slot();  // under mu_: the batch at (next_epoch_, next_index_)
  void start_workers();
  void stop_workers();
  void worker_loop();

  std::shared_ptr<const Dataset> ds_;
  LoaderOptions opt_;
  int64_t batches_ = 0;
  int64_t epoch_ = 0, index_ = 0;
  // Used by the caller's thread when prefetch == 0.
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Slot>> slots_;  // in batch order; at most `prefetch`
  int64_t next_epoch_ = 0, next_index_ = 0;  // the next slot's position
  std::shared_ptr<const std::vector<int64_t>> order_cache_;  // the newest epoch's order
  int64_t order_cache_epoch_ = -1;
  std::vector<Buffer> buffers_;   // prefetch + 2 of them, reused (no page faults or pinning per batch)
  int64_t buffer_bytes_ = 0, targets_offset_ = 0, aux_offset_ = 0, doc_pos_offset_ = 0;
  std::vector<int> spare_;        // free buffers (under mu_)
  std::deque<int> inflight_;      // copied from, oldest first (caller's thread only)
  bool pinned_ = false;
  std::exception_ptr error_;
  bool stop_ = false, running_ = false;
};

}  // namespace lt
