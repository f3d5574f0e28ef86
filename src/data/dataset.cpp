#include "data/dataset.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "data/text_files.hpp"
#include "data/token_file.hpp"

namespace meshtrain::data {
namespace {

namespace fs = std::filesystem;
using ull = unsigned long long;

std::string prepare_hint(const std::string& dir) {
  return strprintf("create it with `meshtrain prepare --input TEXT_FILES_OR_DIRS --output %s`", dir.c_str());
}

void check_agrees(const TokenFile& f, std::uint64_t meta_count, const DatasetMeta& meta,
                  const std::string& meta_path) {
  MESHTRAIN_REQUIRE(f.vocab_size() == meta.vocab_size,
                    "%s has a vocabulary of %lld ids but %s says %lld; the dataset is inconsistent, "
                    "re-run `meshtrain prepare`",
                    f.path().c_str(), static_cast<long long>(f.vocab_size()), meta_path.c_str(),
                    static_cast<long long>(meta.vocab_size));
  MESHTRAIN_REQUIRE(f.size() == meta_count,
                    "%s holds %llu tokens but %s says %llu; the dataset is inconsistent, re-run "
                    "`meshtrain prepare`",
                    f.path().c_str(), static_cast<ull>(f.size()), meta_path.c_str(), static_cast<ull>(meta_count));
}

}  // namespace

Dataset Dataset::open(const std::string& dir) {
  std::error_code ec;
  MESHTRAIN_REQUIRE(fs::is_directory(dir, ec), "dataset directory %s does not exist; %s", dir.c_str(),
                    prepare_hint(dir).c_str());
  for (const char* name : {"meta.json", "train.bin", "val.bin"}) {
    const fs::path p = fs::path(dir) / name;
    MESHTRAIN_REQUIRE(fs::exists(p, ec), "%s is missing, so %s is not a complete dataset; %s",
                      p.string().c_str(), dir.c_str(), prepare_hint(dir).c_str());
  }
  Dataset d;
  d.dir = dir;
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  d.meta = meta_from_json(read_file_bytes(meta_path), meta_path);
  auto train = std::make_shared<TokenFile>((fs::path(dir) / "train.bin").string());
  auto val = std::make_shared<TokenFile>((fs::path(dir) / "val.bin").string());
  check_agrees(*train, d.meta.train_tokens, d.meta, meta_path);
  check_agrees(*val, d.meta.val_tokens, d.meta, meta_path);
  if (d.meta.row_tokens > 0) {
    // Instruction/chat data: the masks must exist and match the tokens and meta.json.
    for (const char* name : {"train.mask", "val.mask"}) {
      const fs::path p = fs::path(dir) / name;
      MESHTRAIN_REQUIRE(fs::exists(p, ec), "%s is missing, but %s says the dataset holds %s examples; %s",
                        p.string().c_str(), meta_path.c_str(), d.meta.data_format.c_str(), prepare_hint(dir).c_str());
    }
    d.train_mask = std::make_shared<MaskFile>((fs::path(dir) / "train.mask").string());
    d.val_mask = std::make_shared<MaskFile>((fs::path(dir) / "val.mask").string());
    for (const auto& [mask, tokens] : {std::pair{d.train_mask, train}, std::pair{d.val_mask, val}})
      MESHTRAIN_REQUIRE(mask->size() == tokens->size() && mask->row_tokens() == d.meta.row_tokens,
                        "%s (%llu bytes, rows of %u) does not match %s (%llu tokens) and %s (rows of %u); the "
                        "dataset is inconsistent, re-run `meshtrain prepare`",
                        mask->path().c_str(), static_cast<ull>(mask->size()), mask->row_tokens(),
                        tokens->path().c_str(), static_cast<ull>(tokens->size()), meta_path.c_str(),
                        d.meta.row_tokens);
    if (d.meta.data_format == "preference")
      for (const auto& [tokens, rows] : {std::pair{train, d.meta.train_rows}, std::pair{val, d.meta.val_rows}})
        MESHTRAIN_REQUIRE(tokens->size() == rows * d.meta.row_tokens,
                          "%s holds %llu tokens, but %s says %llu rows of %u (two per preference pair); the dataset "
                          "is inconsistent, re-run `meshtrain prepare --format preference`",
                          tokens->path().c_str(), static_cast<ull>(tokens->size()), meta_path.c_str(),
                          static_cast<ull>(rows), d.meta.row_tokens);
    if (d.meta.packed) {
      for (const char* name : {"train.docs", "val.docs"}) {
        const fs::path p = fs::path(dir) / name;
        MESHTRAIN_REQUIRE(fs::exists(p, ec), "%s is missing, but %s says the dataset is packed; re-run `meshtrain "
                          "prepare --pack`",
                          p.string().c_str(), meta_path.c_str());
      }
      d.train_docs = std::make_shared<DocFile>((fs::path(dir) / "train.docs").string());
      d.val_docs = std::make_shared<DocFile>((fs::path(dir) / "val.docs").string());
      for (const auto& [docs, tokens] : {std::pair{d.train_docs, train}, std::pair{d.val_docs, val}})
        MESHTRAIN_REQUIRE(docs->size() == tokens->size() && docs->row_tokens() == d.meta.row_tokens,
                          "%s (%llu segment ids, rows of %u) does not match %s (%llu tokens) and %s (rows of %u); "
                          "the dataset is inconsistent, re-run `meshtrain prepare --pack`",
                          docs->path().c_str(), static_cast<ull>(docs->size()), docs->row_tokens(),
                          tokens->path().c_str(), static_cast<ull>(tokens->size()), meta_path.c_str(),
                          d.meta.row_tokens);
    }
  }
  d.train = std::move(train);
  d.val = std::move(val);
  return d;
}

Dataset Dataset::random(std::int64_t vocab, std::uint64_t seed) {
  Dataset d;
  d.dir = "random";
  d.train = std::make_shared<RandomTokens>(vocab, seed);
  d.val = std::make_shared<RandomTokens>(vocab, seed + 1);
  d.meta.tokenizer = "random";
  d.meta.vocab_size = vocab;
  d.meta.train_tokens = d.train->size();
  d.meta.val_tokens = d.val->size();
  return d;
}

Dataset Dataset::load(const DataSource& source, std::int64_t model_vocab, std::uint64_t seed) {
  if (source.is_random()) return random(model_vocab, seed);
  MESHTRAIN_REQUIRE(!source.dir.empty(),
                    "data.dir is not set; give a dataset directory made by `meshtrain prepare`, or "
                    "`random` for synthetic tokens");
  Dataset d = open(source.dir);
  check_vocab(d.meta.vocab_size, model_vocab);
  return d;
}

void check_vocab(std::int64_t dataset_vocab, std::int64_t model_vocab) {
  MESHTRAIN_REQUIRE(dataset_vocab <= model_vocab,
                    "the dataset's vocabulary (%lld) is larger than model.vocab_size (%lld); set "
                    "model.vocab_size to at least %lld",
                    static_cast<long long>(dataset_vocab), static_cast<long long>(model_vocab),
                    static_cast<long long>(dataset_vocab));
}

}  // namespace meshtrain::data
