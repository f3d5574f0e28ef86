#!/usr/bin/env bash
# The fine-tuning demo's data (scripts/run-finetune-demo.sh): dates written the ways people
# write them ("March 7, 2024", "7-Mar-2024", "Thursday, the 7th of March 2024", ...) and
# their ISO 8601 form ("2024-03-07"). The answer is determined by the prompt, so accuracy
# is an exact string match. Generated with awk from a fixed seed (a 31-bit Park-Miller
# generator in awk's doubles: exact, so every awk on every machine writes the same files).
#
# usage: finetune-demo-data.sh OUTDIR [N_TRAIN] [N_HELDOUT]
#   OUTDIR/train.jsonl    N_TRAIN Alpaca records {"instruction","input","output"}
#   OUTDIR/heldout.jsonl  N_HELDOUT records {"prompt","answer"}: dates that are not in train
set -euo pipefail
out=${1:?usage: finetune-demo-data.sh OUTDIR [N_TRAIN] [N_HELDOUT]}
n_train=${2:-2000}
n_heldout=${3:-100}
mkdir -p "$out"
awk -v n_train="$n_train" -v n_heldout="$n_heldout" -v out="$out" '
function rnd(n) {  # uniform integer in [0, n): Park-Miller minimal standard, 48271 * 2^31 < 2^53
  seed = (seed * 48271) % 2147483647
  return int(seed / 2147483647 * n)
}
function leap(y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }
function days_in(m, y) { return m == 2 ? 28 + leap(y) : (m == 4 || m == 6 || m == 9 || m == 11) ? 30 : 31 }
function weekday(y, m, d,   k, j) {  # Zeller: 0 = Saturday
  if (m < 3) { m += 12; y-- }
  k = y % 100; j = int(y / 100)
  return (d + int(13 * (m + 1) / 5) + k + int(k / 4) + int(j / 4) + 5 * j) % 7
}
function ordinal(d) {
  return d ((d % 10 == 1 && d != 11) ? "st" : (d % 10 == 2 && d != 12) ? "nd" : (d % 10 == 3 && d != 13) ? "rd" : "th")
}
function written(y, m, d, style,   M, W) {
  M = month[m]; W = wday[weekday(y, m, d)]
  if (style == 0) return M " " d ", " y
  if (style == 1) return d " " M " " y
  if (style == 2) return substr(M, 1, 3) " " d " " y
  if (style == 3) return d "-" substr(M, 1, 3) "-" y
  if (style == 4) return "the " ordinal(d) " of " M ", " y
  if (style == 5) return W ", " M " " d ", " y
  if (style == 6) return W " " ordinal(d) " " M " " y
  return y ", " M " " d
}
function ask(date, style) {
  if (style == 0) return "Write the date " date " in ISO 8601 form (YYYY-MM-DD). Reply with the date only."
  if (style == 1) return "Convert " date " to the format YYYY-MM-DD. Give only the converted date."
  return "What is " date " as an ISO date (YYYY-MM-DD)? Answer with the date alone."
}
function json(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
function pick(   y, m, d) {
  y = 1900 + rnd(200); m = 1 + rnd(12); d = 1 + rnd(days_in(m, y))
  key = sprintf("%04d-%02d-%02d", y, m, d)
  prompt = ask(written(y, m, d, rnd(8)), rnd(3))
}
BEGIN {
  split("January February March April May June July August September October November December", month, " ")
  split("Saturday Sunday Monday Tuesday Wednesday Thursday Friday", w, " ")
  for (i = 1; i <= 7; i++) wday[i - 1] = w[i]
  seed = 20241
  # Held-out dates first; training never sees one of them (in any written form).
  for (n = 0; n < n_heldout; ) {
    pick()
    if (key in used) continue
    used[key] = 1; n++
    print "{\"prompt\": " json(prompt) ", \"answer\": " json(key) "}" > (out "/heldout.jsonl")
  }
  for (n = 0; n < n_train; ) {
    pick()
    if (key in used) continue
    n++
    print "{\"instruction\": " json(prompt) ", \"input\": \"\", \"output\": " json(key) "}" > (out "/train.jsonl")
  }
}'
