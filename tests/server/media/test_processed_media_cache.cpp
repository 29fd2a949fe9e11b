// ProcessedMediaCache (server/media/processed_media_cache.h): a repeated image is a hit (made
// once, the same pixels and key); changed bytes or changed preprocessing miss; LRU eviction within
// the byte budget; an item over the budget is not kept; budget 0 is off; and through real loaders
// (Qwen2-VL, LLaVA) on real images the cached result equals the uncached load, with its
// media_item_key.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kernels/core/check.h"
#include "server/http/base64.h"
#include "server/media/image_loader.h"
#include "server/media/processed_media_cache.h"
#include "server/media/qwen2vl_media_loader.h"

namespace vlm {
namespace {

const std::string kImages = std::string(VLM_FIXTURES_DIR) + "/llava/images/";

std::string data_url(const std::string& file) {
  std::ifstream in(kImages + file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << file;
  return (file.ends_with(".jpg") ? "data:image/jpeg;base64," : "data:image/png;base64,") + base64_encode(ss.str());
}

MediaPixels pixels(int n, float v) {
  MediaPixels m;
  m.data.assign(static_cast<size_t>(n), v);
  m.height = 1;
  m.width = n;
  return m;
}

BlockHash key_of(const std::string& bytes) { return ProcessedMediaCache::key(bytes, BlockHash{1, 2}); }

const int64_t kItemBytes = 1000 * sizeof(float) + sizeof(ProcessedMediaCache::Item);

TEST(ProcessedMediaCache, RepeatedBytesHitChangedBytesOrPreprocessingMiss) {
  ProcessedMediaCache cache(1 << 20);
  int made = 0;
  auto make = [&](float v) {
    return [&made, v] {
      ++made;
      return pixels(1000, v);
    };
  };
  const auto a = cache.get_or_make(key_of("image-a"), make(1));
  const auto again = cache.get_or_make(key_of("image-a"), make(9));
  EXPECT_EQ(made, 1) << "a hit makes nothing";
  EXPECT_EQ(again.get(), a.get());
  EXPECT_EQ(again->pixels.data[0], 1.0f);
  EXPECT_EQ(a->item_key, media_item_key(a->pixels));
  cache.get_or_make(key_of("image-b"), make(2));
  EXPECT_EQ(made, 2) << "other bytes miss";
  cache.get_or_make(ProcessedMediaCache::key("image-a", BlockHash{1, 3}), make(3));
  EXPECT_EQ(made, 3) << "the same bytes under other preprocessing miss";
  const ProcessedMediaCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.bytes, 3 * kItemBytes);
  EXPECT_NE(key_of("image-a"), key_of("image-a "));
  EXPECT_NE(key_of(""), key_of(std::string(1, '\0')));
}

TEST(ProcessedMediaCache, EvictsLeastRecentlyUsedWithinTheBudget) {
  ProcessedMediaCache cache(2 * kItemBytes);  // room for two items
  int made = 0;
  auto get = [&](const std::string& name) {
    cache.get_or_make(key_of(name), [&] {
      ++made;
      return pixels(1000, 0);
    });
  };
  get("a");
  get("b");
  get("a");  // a is now the most recently used
  get("c");  // evicts b
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  get("a");
  get("c");
  EXPECT_EQ(made, 3) << "a and c stayed";
  get("b");
  EXPECT_EQ(made, 4) << "b was evicted";
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_LE(cache.stats().bytes, 2 * kItemBytes);
}

TEST(ProcessedMediaCache, ItemOverTheBudgetIsNotKeptAndZeroIsOff) {
  ProcessedMediaCache small(kItemBytes - 1);
  int made = 0;
  auto make = [&] {
    ++made;
    return pixels(1000, 0);
  };
  const auto item = small.get_or_make(key_of("big"), make);
  EXPECT_EQ(item->pixels.data.size(), 1000u) << "made and returned";
  small.get_or_make(key_of("big"), make);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(small.stats().entries, 0);
  ProcessedMediaCache off(0);
  EXPECT_FALSE(off.enabled());
  off.get_or_make(key_of("x"), make);
  off.get_or_make(key_of("x"), make);
  EXPECT_EQ(made, 4);
  EXPECT_EQ(off.stats().hits, 0);
}

TEST(ProcessedMediaCache, FailedMakeStoresNothing) {
  ProcessedMediaCache cache(1 << 20);
  EXPECT_THROW(cache.get_or_make(key_of("bad"), []() -> MediaPixels { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.stats().entries, 0);
}

void expect_same(const LoadedImage& got, const MediaPixels& want) {
  EXPECT_EQ(got.pixels.data, want.data);
  EXPECT_EQ(got.pixels.grid_thw, want.grid_thw);
  EXPECT_EQ(got.pixels.height, want.height);
  EXPECT_EQ(got.pixels.width, want.width);
  ASSERT_TRUE(got.item_key.has_value());
  EXPECT_EQ(*got.item_key, media_item_key(want));
}

TEST(ProcessedMediaCache, Qwen2VLLoadsEqualTheUncachedLoadAndMissOnOtherSettings) {
  Qwen2VLMediaOptions o;
  o.image.max_pixels = 200 * 28 * 28;
  const Qwen2VLMediaLoader loader(MediaFetchOptions{}, ImageLimits{}, o);
  Qwen2VLMediaOptions o2 = o;
  o2.image.max_pixels = 100 * 28 * 28;
  const Qwen2VLMediaLoader smaller(MediaFetchOptions{}, ImageLimits{}, o2);
  EXPECT_NE(loader.image_preprocess_key(), smaller.image_preprocess_key());
  ImageLimits tighter;
  tighter.max_pixels = 1000;
  EXPECT_NE(loader.image_preprocess_key(), Qwen2VLMediaLoader(MediaFetchOptions{}, tighter, o).image_preprocess_key());

  ProcessedMediaCache cache(64 << 20);
  const std::string coffee = data_url("coffee.jpg"), cat = data_url("cat_crop.png");
  const MediaPixels want = loader.load_image(coffee, "p");
  expect_same(load_image_cached(cache, loader, coffee, "p"), want);  // miss
  expect_same(load_image_cached(cache, loader, coffee, "p"), want);  // hit
  EXPECT_EQ(cache.stats().hits, 1);
  expect_same(load_image_cached(cache, loader, cat, "p"), loader.load_image(cat, "p"));
  expect_same(load_image_cached(cache, smaller, coffee, "p"), smaller.load_image(coffee, "p"));
  EXPECT_EQ(cache.stats().misses, 3) << "other bytes, other preprocessing";
  EXPECT_NE(smaller.load_image(coffee, "p").grid_thw, want.grid_thw);

  ProcessedMediaCache off(0);
  const LoadedImage plain = load_image_cached(off, loader, coffee, "p");
  EXPECT_EQ(plain.pixels.data, want.data);
  EXPECT_FALSE(plain.item_key.has_value()) << "off: the engine hashes the pixels";
}

TEST(ProcessedMediaCache, LlavaLoadsEqualTheUncachedLoad) {
  ImagePreprocessConfig c;
  c.shortest_edge = 32;
  c.crop_h = c.crop_w = 32;
  const ImageLoader loader(MediaFetchOptions{}, ImageLimits{}, c);
  ImagePreprocessConfig c2 = c;
  c2.do_normalize = false;
  const ImageLoader other(MediaFetchOptions{}, ImageLimits{}, c2);
  EXPECT_NE(loader.image_preprocess_key(), other.image_preprocess_key());
  ProcessedMediaCache cache(64 << 20);
  const std::string url = data_url("rocket_crop.png");
  const MediaPixels want = loader.load(url, "p");
  expect_same(load_image_cached(cache, loader, url, "p"), want);
  expect_same(load_image_cached(cache, loader, url, "p"), want);
  expect_same(load_image_cached(cache, other, url, "p"), other.load(url, "p"));
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 2);
}

TEST(ProcessedMediaCache, RefusedImageIsRefusedEveryTime) {
  const Qwen2VLMediaLoader loader(MediaFetchOptions{}, ImageLimits{}, Qwen2VLMediaOptions{});
  ProcessedMediaCache cache(64 << 20);
  const std::string junk = "data:image/png;base64," + base64_encode("not an image");
  for (int i = 0; i < 2; ++i) EXPECT_THROW(load_image_cached(cache, loader, junk, "p"), RequestError);
  EXPECT_EQ(cache.stats().entries, 0);
}

}  // namespace
}  // namespace vlm
