// `meshtrain tokenize`: what a tokenizer makes of text files (ids, the decoded round trip,
// the tokenizer's identity). Used to check a tokenizer against its reference implementation
// and to see how a model will read one's data. Rank 0 only.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "checkpoint/tokenizer_ref.hpp"
#include "command_options.hpp"
#include "app/commands.hpp"
#include "comm/agree.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/tokenizer.hpp"
#include "formats/json.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct TokenizeArgs {
  std::string tokenizer = "byte";
  std::vector<std::string> files;
  bool info = false, roundtrip = false, decode = false;
  OwnOptions own;  ///< --help
};

TokenizeArgs parse_tokenize_args(const Args& args) {
  TokenizeArgs o;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("tokenizer", po::value<std::string>(&o.tokenizer)->default_value(o.tokenizer),
       ("tokenizer: " + data::tokenizer_spec_help()).c_str())
      ("info", po::bool_switch(&o.info), "print the tokenizer's identity (kind, vocabulary, special ids, hash) as JSON")
      ("roundtrip", po::bool_switch(&o.roundtrip),
       "also check that decoding each file's ids gives the file back (reported on stderr; exit status 1 if not)")
      ("decode", po::bool_switch(&o.decode),
       "the reverse: each FILE holds token ids (whitespace-separated); print the decoded text")
      ("input", po::value<std::vector<std::string>>(&o.files)->multitoken(), "text files (also positional)");
  po::positional_options_description pos;
  pos.add("input", -1);
  o.own = parse_own_options(
      "tokenize",
      "usage: meshtrain tokenize --tokenizer SPEC [--info] [--roundtrip | --decode] FILE...\n"
      "prints one line per file: its token ids separated by spaces (no BOS/EOS added)\n\n",
      desc, args,
      [&](const po::variables_map&) {
        MESHTRAIN_REQUIRE(o.info || !o.files.empty(), "give text files to tokenize, or --info");
      },
      &pos);
  return o;
}

// Bounded (file_io::kMaxTextFileBytes) and regular files only: `tokenize /dev/zero` is an
// error, not a read that never ends.
}  // namespace

int command_tokenize(Runtime& rt, const Args& args) {
  const TokenizeArgs o = parse_tokenize_args(args);
  return run_on_rank0(rt, o.own, [&] {
    int status = 0;
    const auto tok = checkpoint::open_tokenizer(o.tokenizer);
    if (o.info)
      std::printf("%s\n", formats::json_text({{"kind", tok->kind()},
                                              {"name", tok->name()},
                                              {"vocab_size", tok->vocab_size()},
                                              {"bos_id", tok->bos_id()},
                                              {"eos_id", tok->eos_id()},
                                              {"pad_id", tok->pad_id()},
                                              {"eot_id", tok->eot_id()},
                                              {"add_bos", tok->add_bos()},
                                              {"hash", tok->hash()}})
                                .c_str());
    for (const std::string& f : o.files) {
      const std::string text = file_io::read_text_file(f, "");
      if (o.decode) {
        // Each id is checked, not narrowed: 4294967297 must not wrap to id 1. Ids that fit
        // an int32 but lie outside the vocabulary decode to U+FFFD, as decode() documents.
        std::vector<std::int32_t> in;
        std::istringstream is(text);
        std::string word;
        while (is >> word) {
          char* end = nullptr;
          errno = 0;
          const long long v = std::strtoll(word.c_str(), &end, 10);
          MESHTRAIN_REQUIRE(*end == '\0', "%s must hold whitespace-separated token ids; token %zu is '%s'", f.c_str(),
                            in.size() + 1, word.c_str());
          const std::string key = strprintf("token %zu", in.size() + 1);
          if (errno == ERANGE) throw_int_out_of_range(f, key, word, INT32_MIN, INT32_MAX);
          in.push_back(checked_int<std::int32_t>(v, f, key));
        }
        const std::string back = tok->decode(in);
        std::fwrite(back.data(), 1, back.size(), stdout);
        continue;
      }
      std::vector<std::int32_t> ids;
      try {
        ids = tok->encode(text);
      } catch (const UserError& e) {
        throw UserError(strprintf("%s: %s", f.c_str(), e.what()));
      }
      if (o.roundtrip) {
        const std::string back = tok->decode(ids);
        if (back == text) {
          std::fprintf(stderr, "roundtrip ok: %s (%zu bytes, %zu tokens)\n", f.c_str(), text.size(), ids.size());
        } else {
          std::size_t at = 0;
          while (at < back.size() && at < text.size() && back[at] == text[at]) ++at;
          std::fprintf(stderr, "roundtrip MISMATCH: %s differs from its decoded ids at byte %zu\n", f.c_str(), at);
          status = 1;
        }
      }
      std::string line;
      line.reserve(ids.size() * 6);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ' ';
        line += std::to_string(ids[i]);
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
    std::fflush(stdout);
    return status;
  });
}

}  // namespace meshtrain::app
