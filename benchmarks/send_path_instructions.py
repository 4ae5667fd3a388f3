"""Machine instructions per SEND on the broker's send path: a figure the machine's speed does not move.

On a shared 2-core machine the CPU time per message of the same code swings by a third from
minute to minute, so two builds compared by time need many alternating runs. valgrind's
callgrind counts the instructions executed instead, which stays within ~2 % run to run
(threads and the bench's waits for fsync vary a little) whatever else the machine is doing.

It runs `send_path_bench.py` (in-process: STOMP parse → session → broker → storage) under
callgrind twice, with `--small` and `--messages` SENDs, and reports the difference divided
by the difference in messages, so start-up and imports cancel out:

    .venv/bin/python benchmarks/send_path_instructions.py [--messages 20000] [--small 2000] \
        [-- BENCH ARGS]   # default bench args: the Spark sink's load (see below)

Default bench args: `--persistent --transaction 1000 --paging` (transactions of 1,000 SENDs
with `_AMQ_DUPL_ID`, every message paged). Under callgrind Python runs ~50 times slower: the
default takes about three minutes. `PYTHONPATH` selects the tree measured.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).with_name("send_path_bench.py")
DEFAULT_ARGS = ["--persistent", "--transaction", "1000", "--paging"]
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def instructions(messages: int, bench_args: list[str]) -> int:
    """Instructions callgrind counted for one bench run of `messages` SENDs (every thread)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, str(BENCH), "--messages", str(messages), *bench_args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=2_000, help="the run whose count is subtracted")
    parser.add_argument("bench_args", nargs="*", help="send_path_bench arguments (after --)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.messages <= args.small:
        raise SystemExit("--messages must be more than --small")
    bench_args = args.bench_args or DEFAULT_ARGS
    small = instructions(args.small, bench_args)
    large = instructions(args.messages, bench_args)
    per_send = (large - small) / (args.messages - args.small)
    print(f"{per_send:,.0f} instructions per SEND ({' '.join(bench_args)}; "
          f"{args.small} and {args.messages} SENDs under callgrind)")


if __name__ == "__main__":
    main()
