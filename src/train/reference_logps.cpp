#include "train/reference_logps.hpp"

#include <cmath>
#include <filesystem>

#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"
#include "formats/json.hpp"

namespace meshtrain::train {
namespace {

constexpr const char* kFormat = "meshtrain-dpo-reference";

std::uint32_t checksum(const ReferenceLogps& r) {
  const std::uint32_t c = crc32c::value(r.train.data(), r.train.size() * sizeof(double));
  return crc32c::extend(c, r.val.data(), r.val.size() * sizeof(double));
}

}  // namespace

std::string reference_logps_path(const std::string& out_dir) { return out_dir + "/reference_logps.json"; }

void write_reference_logps(const std::string& path, const ReferenceLogps& r) {
  formats::Json j = {{"format", kFormat},
                     {"version", 1},
                     {"dataset", r.dataset},
                     {"train", r.train},
                     {"val", r.val},
                     {"crc32c", checksum(r)}};
  file_io::replace_file(path, formats::json_text(j) + "\n");
}

ReferenceLogps read_reference_logps(const std::string& path, const std::string& dataset, std::uint64_t train_rows,
                                    std::uint64_t val_rows) {
  MESHTRAIN_REQUIRE(std::filesystem::exists(path),
                    "%s is missing: a DPO run without LoRA adapters, or one that continues the LoRA adapters of its "
                    "checkpoint.init_from, measures its rewards against the log-probabilities of its initial policy, "
                    "computed before step 1 and stored there; a resume cannot recompute them. "
                    "Restore the file, or start the run again (checkpoint.resume=none with checkpoint.overwrite=true)",
                    path.c_str());
  const std::string text = file_io::read_text_file(path, "the DPO reference log-probabilities");
  ReferenceLogps r;
  std::uint32_t stored_crc = 0;
  try {
    const formats::Json j = formats::parse_json(text);
    MESHTRAIN_REQUIRE(j.is_object() && j.value("format", std::string()) == kFormat && j.value("version", 0) == 1,
                      "%s is not a meshtrain DPO reference file (format %s, version 1)", path.c_str(), kFormat);
    r.dataset = j.at("dataset").get<std::string>();
    r.train = j.at("train").get<std::vector<double>>();
    r.val = j.at("val").get<std::vector<double>>();
    stored_crc = j.at("crc32c").get<std::uint32_t>();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(strprintf("%s: not a valid DPO reference file: %s", path.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(checksum(r) == stored_crc,
                    "%s is damaged: its values' CRC-32C is %08x, it records %08x; start the run again "
                    "(checkpoint.resume=none with checkpoint.overwrite=true) to recompute it",
                    path.c_str(), checksum(r), stored_crc);
  for (const auto* v : {&r.train, &r.val})
    for (double x : *v)
      MESHTRAIN_REQUIRE(std::isfinite(x) && x <= 0, "%s holds a log-probability %g, not a finite value <= 0",
                        path.c_str(), x);
  MESHTRAIN_REQUIRE(r.dataset == dataset && r.train.size() == train_rows && r.val.size() == val_rows,
                    "%s was computed for %s (%zu train and %zu validation rows), but this run trains on %s (%llu and "
                    "%llu rows): the reference belongs to the run's own dataset",
                    path.c_str(), r.dataset.c_str(), r.train.size(), r.val.size(), dataset.c_str(),
                    static_cast<unsigned long long>(train_rows), static_cast<unsigned long long>(val_rows));
  return r;
}

}  // namespace meshtrain::train
