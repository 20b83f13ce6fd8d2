"""llmtap's cost per Bedrock event-stream message inside the real ``anthropic`` SDK (``AnthropicBedrock``
against the simulator in a separate process): a resolving aid for the per-message path
(``benchmarks/sdk.py`` owns the figures users pay).

One process, llmtap's core instrumented once (``sdk.py``'s ``core`` configuration); blocks of streams
alternate between three modes: llmtap off (the installation switched off, as ``core_path.py`` does), llmtap
reading every message (``quiet_frames`` emptied: each message sliced out, its headers looked up, its base64
decoded and marker-scanned, the path before the skip) and llmtap as shipped (past the first token a
content delta is only checked: CRCs, header block, payload prefix). CPU time (``process_time``: other
processes' load does not count), per event, the minimum and the median over rounds of each mode.

    python benchmarks/bedrock_path.py [--rounds 12] [--streams 4] [--tokens 500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sdk  # benchmarks/sdk.py: the same configuration and workload

from llmtap import _installation
from llmtap._providers import bedrock

MODES = ("off", "every message read", "content deltas skipped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--streams", type=int, default=4, help="streams per block")
    parser.add_argument("--tokens", type=int, default=500, help="content deltas per stream")
    args = parser.parse_args(argv)
    if min(args.rounds, args.streams, args.tokens) < 1:
        print("bedrock_path.py: --rounds, --streams and --tokens must be positive", file=sys.stderr)
        return 2
    sdk.ensure_bytecode()
    with sdk.ChildSimulator() as sim:
        sdk.configure("core", sim.base_url)
        installation = _installation.current
        workloads = sdk.Workloads(sim.base_url, args.tokens)
        workloads.bedrock_stream(2)  # warm: connection, first-use caches
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                _installation.current = None if mode == "off" else installation
                if mode == "every message read":
                    bedrock.PROVIDER.quiet_frames = ()
                start = time.process_time()
                events = workloads.bedrock_stream(args.streams)
                times[mode].append((time.process_time() - start) / events * 1e6)
                vars(bedrock.PROVIDER).pop("quiet_frames", None)
        _installation.current = installation
        workloads.close()
    off_min, off_median = min(times["off"]), statistics.median(times["off"])
    print(f"{args.rounds} rounds x {args.streams} streams x ~{args.tokens} events; CPU µs per event (min, median)")
    for mode in MODES:
        low, median = min(times[mode]), statistics.median(times[mode])
        added = "" if mode == "off" else f"   added {low - off_min:+.2f} (min), {median - off_median:+.2f} (median)"
        print(f"  {mode:<24} {low:7.2f} {median:7.2f}{added}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
