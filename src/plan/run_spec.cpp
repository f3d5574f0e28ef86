// The batch arithmetic (plan/run_spec.hpp): the one place global_batch, micro_batch, dp and
// grad_accum are related.
#include "plan/run_spec.hpp"

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::plan {

std::string BatchSpec::split_error(int dp) const {
  const int per = micro_batch * dp;
  return strprintf("train.global_batch=%d is not a multiple of train.micro_batch x data-parallel ranks = %d x %d = %d; "
                   "choose a global batch that is a multiple of %d, or change train.micro_batch",
                   global_batch, micro_batch, dp, per, per);
}

BatchSpec BatchSpec::resolved(int dp) const {
  BatchSpec b = *this;
  if (global_batch > 0) {
    if (!splits(dp)) throw UserError(split_error(dp));
    b.grad_accum = global_batch / (micro_batch * dp);
  } else {
    b.global_batch = micro_batch * dp * grad_accum;
  }
  return b;
}

}  // namespace meshtrain::plan
