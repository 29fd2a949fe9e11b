// BlockHash: the identity of one full KV block for automatic prefix caching (vLLM's V1 scheme,
// docs.vllm.ai "Automatic Prefix Caching"): a 128-bit hash chained over the previous block's
// hash, the block's token ids and the identity of every media item whose tokens the block holds.
// Two blocks with the same hash hold the same K/V on the exact path, so a new sequence whose
// leading blocks hash the same may reuse them instead of prefilling them again.
//
// What goes in (everything else that changes K/V is either global to the engine, e.g. the model,
// the KV dtype or the GEMM precision, or keeps a sequence from publishing its blocks at all:
// LOOK-M, sparse prefill, SinkRouter-routed decode; see Sequence::prefix_cache_publish_limit):
//   - the chain's seed: Sequence::prefix_cache_salt (the request's cache_salt, vLLM's field);
//   - the token ids of the block (placeholders of media tokens included);
//   - for each media item overlapping the block, its MediaInputs::item_keys entry
//     (media_item_key): its modality, size, grid, frames and seconds per grid step (M-RoPE
//     positions follow from these and the tokens), and either
//       * the loader's source key (MediaPixels::source_key; the Qwen2-VL and Qwen3-VL loaders set
//         it, image and video alike, and a Qwen3-VL video's groups each the video's with its
//         index): a hash of the fetched bytes (after a data: URL's base64 decode, so
//         the same file sent as a URL or as base64 matches) and of everything that changes the
//         preprocessed result (processor settings, limits, the sampled frame indices and rate,
//         the per-frame pixel cap, hence the resize target); nothing walks the pixels, and the
//         key is the same whichever form (Rows or Frames8) the item travels in;
//       * else the pixels: the f32 values of a Rows item (LLaVA families), or the 8-bit frames
//         and processor settings of a Frames8 item. The decoded image and the preprocessing
//         both count, and URL vs base64 still match (the same bytes decode the same).
//     A different preprocessing (another fps, frame count, resize target or setting) gives a
//     different key either way.
// The hash is not cryptographic: a collision would silently reuse the wrong K/V. With 128 bits
// the chance for honest traffic is negligible, but a client able to craft collisions could
// poison another tenant's prefix; vLLM hashes with sha256 by default for that reason
// (shared/SERVING.md), and cache_salt isolates tenants either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vlm {

struct MediaPixels;
struct Sequence;

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
};

// Streaming 128-bit hash (two independent 64-bit lanes, multiply-xorshift mixing).
class Hasher128 {
 public:
  Hasher128& add(uint64_t word);
  Hasher128& add(const BlockHash& h) { return add(h.lo).add(h.hi); }
  // Order- and length-sensitive; inputs of kLanesFromBytes or more hash their whole 32-byte
  // blocks in four interleaved lanes (same quality, several times the speed), the rest word by word.
  Hasher128& add_bytes(const void* data, size_t n);
  static constexpr size_t kLanesFromBytes = 1024;
  BlockHash digest() const;

 private:
  uint64_t a_ = 0x6A09E667F3BCC908ull;
  uint64_t b_ = 0xBB67AE8584CAA73Bull;
  uint64_t n_ = 0;
};

// The chain's seed for a request: empty salt -> a fixed value; otherwise salted (requests with
// different cache_salt never share blocks).
BlockHash prefix_cache_seed(std::string_view cache_salt);

// Identity of one media item (see above): its source key when set, else its pixels (patch rows,
// or a Frames8 item's frames and settings); with its sizes, grid, modality, frames and seconds
// per grid step.
BlockHash media_item_key(const MediaPixels& item);

// Appends to seq.block_hashes the hash of every full block of seq.token_ids not hashed yet
// (block j covers token positions [j*B, (j+1)*B)), chained from seq.prefix_cache_seed.
void extend_block_hashes(Sequence& seq, int block_size);

}  // namespace vlm
