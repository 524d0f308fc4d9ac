// tokenizer.json "model" of type BPE: the vocabulary, the merges (as "a b" strings in older files,
// ["a", "b"] pairs in newer ones) and tokenizers' options: unk_token, fuse_unk, byte_fallback
// (<0xXX> tokens for characters outside the vocabulary), ignore_merges (a word found whole in
// the vocabulary is one token), continuing_subword_prefix, end_of_word_suffix.
//
// A word is split into characters, then the adjacent pair of lowest merge rank is merged, the
// leftmost first among equal ranks, until no pair has a merge (tokenizers' Word::merge_all).
// Words are cached, as tokenizers caches them; the cache changes no result.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_read.h"
#include "text/token_model.h"

namespace lt::text {

class BpeModel final : public TokenModel {
 public:
  static std::unique_ptr<BpeModel> read(const Json& j, const std::string& where, const JsonReader& r);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;  // nullptr when no token has this id
  size_t entries() const override { return vocab_.size(); }   // tokenizers' get_vocab_size()
  int64_t max_id() const override { return int64_t(tokens_.size()) - 1; }
  bool byte_fallback() const override { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t a, int32_t b) const;

  TokenMap vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<uint8_t> has_token_;   // by id: whether tokens_[id] is a token
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> ids for byte_fallback, -1 where missing

  // The word cache: direct-mapped slots by hash (a new word replaces the one in its slot), in
  // shards with their own lock, as encode runs on several loader threads.
  struct CacheSlot {
    size_t hash = 0;
    std::string word;
    std::vector<int32_t> ids;
  };
  struct CacheShard {
    std::mutex mutex;
    std::vector<CacheSlot> slots;
  };
  static constexpr size_t kCacheShards = 16, kCacheSlotsPerShard = 4096;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace lt::text
