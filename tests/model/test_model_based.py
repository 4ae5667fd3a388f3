"""Model-based randomized test: generated programs run against the real broker process.

Each program (tests/model/model_program.py) draws a paging-heavy broker config and a few dozen
operations: receipted and unreceipted SENDs to queues and topics, durable and non-durable
subscribers with every ack mode, selectors and prefetch, ACK/NACK, disconnects and dropped
sockets with messages in flight, transactions, graceful restarts and kill -9, an operator's
purge, and a streaming reader (the Spark source's range reads and commits) on a queue of its
own. The reference model (model_reference.py) says after each step what the broker must, may and must not do:
nothing receipted lost, nothing acknowledged with a receipt back, nothing phantom, FIFO per
producer for a lone consumer, no stall while messages are counted, HTTP counts in range.

The first failing program is shrunk and reported with its seed; replay with
`PAGEMQ_MODEL_SEED=N make soak` (see model_driver.py for every knob, README.md for how).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from model_driver import run_programs

DEFAULT_PROGRAMS = 20


@pytest.mark.timeout(900)
def test_generated_programs_keep_every_promise_the_broker_makes(tmp_path: Path) -> None:
    """The bounded share of `make test`: a few programs with restarts and kills in them."""
    run_programs(tmp_path, default_count=DEFAULT_PROGRAMS, minutes=None, shrink_budget=60)


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak_generated_programs_for_as_long_as_asked(tmp_path: Path) -> None:
    """`make soak` / `make test-slow`: programs until PAGEMQ_MODEL_MINUTES (default 10) have
    passed or PAGEMQ_MODEL_PROGRAMS have run; stops at the first failure."""
    minutes = float(os.environ.get("PAGEMQ_MODEL_MINUTES", "10"))
    run_programs(tmp_path, default_count=None, minutes=minutes, shrink_budget=600)
