#include "engine/scheduling/block_hash.h"

#include <cstring>

#include "engine/scheduling/sequence.h"
#include "kernels/core/check.h"
#include "model/media/media_pixels.h"

namespace vlm {
namespace {

uint64_t mix(uint64_t x) {  // a 64-bit finalizer: every input bit reaches every output bit
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

Hasher128& Hasher128::add(uint64_t word) {
  a_ = mix(a_ ^ word) + 0x9E3779B97F4A7C15ull;
  b_ = mix(b_ + (word ^ 0xD6E8FEB86659FD93ull)) ^ (a_ >> 17);
  ++n_;
  return *this;
}

Hasher128& Hasher128::add_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  add(n);
  size_t i = 0;
  if (n >= kLanesFromBytes) {
    // Bulk input (a video's patch rows: ~2 GB at 98K tokens): four independent chains over
    // interleaved words, one mix per word, so the CPU overlaps their multiplies (add()'s two
    // dependent mixes a word ran at ~1 s for 2 GB on the request's path); the lanes fold in after.
    // mix is a bijection, so within a lane a changed word always changes the state.
    uint64_t l0 = 0x243F6A8885A308D3ull, l1 = 0x13198A2E03707344ull, l2 = 0xA4093822299F31D0ull,
             l3 = 0x082EFA98EC4E6C89ull;
    for (; i + 32 <= n; i += 32) {
      uint64_t w[4];
      std::memcpy(w, p + i, 32);
      l0 = mix(l0 ^ w[0]) + 0x9E3779B97F4A7C15ull;
      l1 = mix(l1 ^ w[1]) + 0x9E3779B97F4A7C15ull;
      l2 = mix(l2 ^ w[2]) + 0x9E3779B97F4A7C15ull;
      l3 = mix(l3 ^ w[3]) + 0x9E3779B97F4A7C15ull;
    }
    add(l0).add(l1).add(l2).add(l3);
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    add(w);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    add(w);
  }
  return *this;
}

BlockHash Hasher128::digest() const { return {mix(a_ ^ n_), mix(b_ + a_)}; }

BlockHash prefix_cache_seed(std::string_view cache_salt) {
  Hasher128 h;
  h.add(0x70726566697863ull);  // "prefixc"
  if (!cache_salt.empty()) h.add_bytes(cache_salt.data(), cache_salt.size());
  return h.digest();
}

BlockHash media_item_key(const MediaPixels& item) {
  Hasher128 h;
  h.add(static_cast<uint64_t>(item.modality));
  h.add(static_cast<uint64_t>(item.height)).add(static_cast<uint64_t>(item.width));
  for (int32_t g : item.grid_thw) h.add(static_cast<uint64_t>(static_cast<uint32_t>(g)));
  uint32_t spg = 0;
  std::memcpy(&spg, &item.second_per_grid, sizeof spg);
  h.add(spg).add(static_cast<uint64_t>(item.num_frames));
  if (item.has_source_key) {  // the loader's identity of the bytes and the preprocessing: no pixel walk
    h.add(0x736f75726365ull);  // "source"
    h.add(item.source_key[0]).add(item.source_key[1]);
  } else if (item.is_frames8()) {  // the 8-bit frames and the settings the rows follow from
    const Qwen2VLPreprocessConfig& c = item.preprocess;
    h.add(0x6672616d657338ull);  // "frames8"
    for (int64_t v : {c.min_pixels, c.max_pixels, int64_t{c.patch_size}, int64_t{c.temporal_patch_size},
                      int64_t{c.merge_size}, int64_t{c.do_resize}, int64_t{c.do_rescale}, int64_t{c.do_normalize}})
      h.add(static_cast<uint64_t>(v));
    uint64_t rf = 0;
    std::memcpy(&rf, &c.rescale_factor, sizeof rf);
    h.add(rf);
    for (int i = 0; i < 3; ++i) {
      uint32_t m = 0, s = 0;
      std::memcpy(&m, &c.mean[static_cast<size_t>(i)], sizeof m);
      std::memcpy(&s, &c.std[static_cast<size_t>(i)], sizeof s);
      h.add(m).add(s);
    }
    for (const RgbImage& f : item.frames) {
      h.add(static_cast<uint64_t>(f.width)).add(static_cast<uint64_t>(f.height));
      h.add_bytes(f.pixels.data(), f.pixels.size());
    }
  } else {
    h.add_bytes(item.data.data(), item.data.size() * sizeof(float));
  }
  return h.digest();
}

void extend_block_hashes(Sequence& seq, int block_size) {
  const int32_t B = block_size;
  const MediaInputs* m = seq.media.get();
  VLM_CHECK(!m || m->item_keys.size() == m->first_token.size(), "sequence {}: {} media keys for {} items", seq.id,
            m ? m->item_keys.size() : 0, m ? m->first_token.size() : 0);
  const auto full = static_cast<size_t>(seq.num_tokens() / B);
  while (seq.block_hashes.size() < full) {
    const auto j = static_cast<int32_t>(seq.block_hashes.size());
    const int32_t begin = j * B, end = begin + B;
    Hasher128 h;
    h.add(j == 0 ? seq.prefix_cache_seed : seq.block_hashes.back());
    h.add_bytes(seq.token_ids.data() + begin, static_cast<size_t>(B) * sizeof(int32_t));
    if (m)
      for (size_t k = 0; k < m->first_token.size(); ++k)
        if (m->first_token[k] < end && m->first_token[k] + m->num_tokens[k] > begin)
          h.add(m->item_keys[k]);
    seq.block_hashes.push_back(h.digest());
  }
}

}  // namespace vlm
