#!/usr/bin/env python3
"""The config keys that turn off the fused paths the self-check did not pass.

perf/gpu/validate.sh runs selfcheck_paths first; a path that FAILs there would make the
training runs after it fail their loss check, and the one device call would measure
nothing. So validate.sh gives every meshtrain run the keys printed here (issue 33: every
fused path has one key that turns it off, so a failing path costs only itself), and the
call still measures the rest of the build; the verdict stays FAIL.

  perf/gpu/fallback.py SELFCHECK_TXT SELFCHECK_STATUS

SELFCHECK_TXT: selfcheck_paths' output ("PASS name (...)", "SKIP name (...)",
"FAIL name: ..."); SELFCHECK_STATUS: its exit status (0 all ran and passed, 1 a path
failed, anything else: it stopped early -- crashed, timed out, or never ran).
Prints one line per key: "KEY=VALUE<TAB>why" (nothing when nothing is turned off). A path
turned off: it FAILed, or the self-check stopped before it reported (a crash on the device
can be a sticky CUDA error that every later path would inherit: none of them is trusted, nor
the rest of the group of the last path that reported).
A failing path without a key (the packed-row kernels: the validation's runs do not pack
rows) and a path this script does not know are reported on stderr, and turn nothing off.
"""
import re
import sys

# Path-name prefix -> the keys that turn it off. fused_norms: the fused kernels and the
# plain norms share the norm form (gpu.norm_form), so a failure there may be either's: both
# go back to their earlier forms. attention.cudnn covers attention.cudnn_ragged.
SWITCHES = [
    ("fused_optimizer.", ["gpu.fused_optimizer=false"]),
    ("packed.", []),
    ("attention.cudnn", ["gpu.attention=kokkos"]),
    ("fused_loss.", ["gpu.fused_loss=false"]),
    ("fused_norms.", ["gpu.fused_norms=false", "gpu.norm_form=rows"]),
    ("row_packs.", ["gpu.row_packs=false"]),
    ("graphs.", ["gpu.graphs=false"]),
    ("epilogues.", ["gpu.epilogues=false"]),
]


def selfcheck_paths(text):
    """selfcheck_paths' output -> {path: (verdict, detail)} in output order; a path reported
    twice keeps its last line. One reader for this script and summarize.py."""
    paths = {}
    for line in text.splitlines():
        m = re.match(r"(PASS|FAIL|SKIP) (\S+?)(?:: | \()(.*)", line)
        if m:
            paths[m.group(2)] = (m.group(1), m.group(3).rstrip(")"))
    return paths


def switch_of(path):
    for prefix, keys in SWITCHES:
        if path.startswith(prefix):
            return prefix, keys
    return None, None


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: fallback.py SELFCHECK_TXT SELFCHECK_STATUS")
    try:
        text = open(sys.argv[1]).read()
    except OSError:
        text = ""
    status = sys.argv[2].strip() or "?"
    verdicts = {path: v for path, (v, _) in selfcheck_paths(text).items()}
    off = {}  # key -> reasons
    for path, v in verdicts.items():
        if v != "FAIL":
            continue
        prefix, keys = switch_of(path)
        if prefix is None:
            print("fallback: %s FAILed and has no known key (add it to perf/gpu/fallback.py)" % path, file=sys.stderr)
        elif not keys:
            print("fallback: %s FAILed; no key turns it off (runs with packed rows only, none here)" % path,
                  file=sys.stderr)
        for k in keys or []:
            off.setdefault(k, []).append("%s FAIL" % path)
    if status not in ("0", "1"):
        # Stopped early: every group that has not reported a PASS or SKIP line is off, and so
        # is the group of the last line (the path that stopped it may be that group's next).
        reported = {switch_of(p)[0] for p, v in verdicts.items() if v in ("PASS", "SKIP")}
        if verdicts:
            reported.discard(switch_of(list(verdicts)[-1])[0])
        for prefix, keys in SWITCHES:
            if prefix in reported:
                continue
            for k in keys:
                off.setdefault(k, []).append("%s* no result (selfcheck_paths stopped, status %s)" % (prefix, status))
    for k, why in off.items():
        print("%s\t%s" % (k, "; ".join(dict.fromkeys(why))))


if __name__ == "__main__":
    main()
