"""Programs for the model-based test: a broker configuration plus a list of operations.

A program is data, not code: `generate(seed)` draws one from a seed (the same seed gives the
same program on every machine), `to_json`/`from_json` save and load it, and `format_program`
prints it as the trace a failure report shows. Every operation names its arguments
explicitly (slot, destination, message ids), so any subsequence of a program is still a
program: the runner treats an operation whose precondition does not hold (an ACK on a slot
with nothing to acknowledge, a COMMIT with no transaction) as a no-op. That is what lets the
shrinker drop operations freely.

Slots are client connections (`client-id` `c<N>`), opened on first use. A slot has at most one
subscription and one transaction at a time. Message ids (`mid`) are unique in a program and
survive shrinking, so a shrunk trace names the same messages as the original failure.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

ACK_MODES = ("auto", "client", "client-individual")
ADMIN_SHARE = 0.04  # of the steps followed by an operator's purge of a queue
# The queue only a streaming reader reads (the Spark source's endpoints): SENDs to it follow
# this share of the steps, a read (and most often its commit) this one.
STREAM_QUEUE = "/queue/s0"
STREAM_SEND_SHARE = 0.12
STREAM_READ_SHARE = 0.07
COLORS = ("red", "blue", "green")
# Selectors (on the `color` property) and the Python predicates the model checks them with.
SELECTORS: dict[str, tuple[str, ...]] = {
    "color = 'red'": ("red",),
    "color <> 'blue'": ("red", "green"),
    "color IN ('blue', 'green')": ("blue", "green"),
}


def selector_accepts(selector: str | None, color: str) -> bool:
    """Whether `selector` (one of SELECTORS, or None) matches a message of this color."""
    return selector is None or color in SELECTORS[selector]


@dataclass
class BrokerConfig:
    """The knobs a program draws to stress paging (rendered as the broker's TOML config)."""

    max_size_bytes: int | str = 0
    max_size_messages: int = -1
    page_size_bytes: str = "8KiB"
    max_read_page_messages: int = -1
    prefetch_page_messages: int = -1
    global_max_size: int | str = -1
    journal_file_size: str | None = None
    cleanup_period: str | None = None

    def toml(self) -> dict[str, Any]:
        broker: dict[str, Any] = {"global-max-size": self.global_max_size}
        if self.journal_file_size is not None:
            broker["journal-file-size"] = self.journal_file_size
        if self.cleanup_period is not None:
            broker["cleanup-period"] = self.cleanup_period
        return {
            "broker": broker,
            "address-settings": {"#": {
                "address-full-policy": "PAGE",
                "max-size-bytes": self.max_size_bytes,
                "max-size-messages": self.max_size_messages,
                "page-size-bytes": self.page_size_bytes,
                "max-read-page-messages": self.max_read_page_messages,
                "prefetch-page-messages": self.prefetch_page_messages,
                # The message-count limits are the ones drawn; the byte limits are kept out of
                # the way so the model knows exactly which read limit applies.
                "max-read-page-bytes": "4MiB",
                "prefetch-page-bytes": "4MiB",
                # No dead-lettering: a NACKed message always comes back to its queue.
                "max-delivery-attempts": 1000,
            }},
        }


@dataclass
class Op:
    """One operation. `kind` says what; `args` are its (JSON-able) arguments."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for key, value in self.args.items():
            if value is True:
                parts.append(key)
            elif value is None or value is False:
                continue
            elif isinstance(value, list):
                parts.append(f"{key}=[{','.join(str(v) for v in value)}]")
            else:
                parts.append(f"{key}={value}")
        return f"{self.kind} {' '.join(parts)}".rstrip()


@dataclass
class Program:
    seed: int
    config: BrokerConfig
    body_size: int
    ops: list[Op]
    final: str = "restart"  # how the broker is stopped after the drain: "restart" | "kill"
    note: str = ""

    def with_ops(self, ops: list[Op]) -> Program:
        return Program(self.seed, self.config, self.body_size, list(ops), self.final, self.note)


def to_json(program: Program) -> str:
    return json.dumps({
        "seed": program.seed, "config": asdict(program.config), "body_size": program.body_size,
        "final": program.final, "note": program.note,
        "ops": [{"kind": op.kind, "args": op.args} for op in program.ops],
    }, indent=1)


def from_json(text: str) -> Program:
    data = json.loads(text)
    return Program(
        data["seed"], BrokerConfig(**data["config"]), data["body_size"],
        [Op(item["kind"], item["args"]) for item in data["ops"]], data.get("final", "restart"),
        data.get("note", ""),
    )


def format_program(program: Program, ops: list[Op] | None = None) -> str:
    ops = program.ops if ops is None else ops
    lines = [f"config: {json.dumps(program.config.toml()['address-settings']['#'])}",
             f"        broker {json.dumps(program.config.toml()['broker'])}, body {program.body_size} bytes"]
    lines += [f"  {op.describe()}" for op in ops]
    lines.append(f"  (then: drain every queue, {program.final}, expect every queue empty)")
    return "\n".join(lines)


# -- generation ---------------------------------------------------------------------------


def _draw_config(rnd: random.Random) -> BrokerConfig:
    config = BrokerConfig()
    if rnd.random() < 0.6:
        config.max_size_bytes = 0  # everything pages
    else:
        config.max_size_bytes = -1
        config.max_size_messages = rnd.randint(1, 5)
    config.page_size_bytes = f"{rnd.choice([4, 4, 8, 16, 32, 64])}KiB"
    config.max_read_page_messages = rnd.choice([-1, 1, 2, 3, 4, 5])
    config.prefetch_page_messages = rnd.choice([-1, 1, 2, 3, 4, 5])
    if rnd.random() < 0.3:
        config.global_max_size = rnd.choice(["16KiB", "64KiB", "256KiB"])
    if rnd.random() < 0.3:
        config.journal_file_size = rnd.choice(["16KiB", "64KiB"])
    if rnd.random() < 0.3:
        config.cleanup_period = rnd.choice(["50ms", "300ms"])
    return config


class _Slot:
    """What the generator knows of a slot (the runner knows the rest at run time)."""

    def __init__(self) -> None:
        self.connected = False
        self.sub: dict[str, Any] | None = None
        self.tx: str | None = None


class _Generator:
    def __init__(self, seed: int, length: int) -> None:
        self.rnd = random.Random(seed)
        self.seed = seed
        self.length = length
        rnd = self.rnd
        self.queues = [f"/queue/q{n}" for n in range(rnd.randint(1, 2))]
        self.topics = [f"/topic/t{n}" for n in range(rnd.choice([0, 1, 1, 2]))]
        self.slots = [_Slot() for _ in range(rnd.randint(2, 4))]
        # durable subscriptions that exist: (slot, topic, name) -> selector
        self.durables: dict[tuple[int, str, str], str | None] = {}
        self.ops: list[Op] = []
        self.next_tx = 0
        # Management actions (issue 18: purge over HTTP) and a streaming reader's queue
        # (its SENDs and reads) are drawn from streams of their own and not counted in the
        # program's length, message ids or the other streams' keys, so every earlier seed
        # keeps its operations, with these in between.
        self.side_ops = 0
        # receipted persistent sends a producer may retry: (dest, mid, color)
        self.sent: list[tuple[str, str, str]] = []

    # -- helpers --------------------------------------------------------------------------

    def mid(self, suffix: str = "") -> str:
        return f"m{self.steps}{suffix}"

    @property
    def steps(self) -> int:
        """Operations so far, management actions and the stream's not counted."""
        return len(self.ops) - self.side_ops

    def dest(self) -> str:
        return self.rnd.choice(self.queues + self.topics)

    def color(self) -> str:
        return self.rnd.choice(COLORS)

    def emit(self, kind: str, **args: Any) -> None:
        self.ops.append(Op(kind, args))

    def pick(self) -> float:
        """Which held message an ACK/NACK names: a fraction of the held list, biased to the
        oldest and newest ends."""
        roll = self.rnd.random()
        if roll < 0.35:
            return 0.0
        if roll < 0.6:
            return 0.999
        return round(self.rnd.random(), 3)

    # -- the program ----------------------------------------------------------------------

    def run(self) -> list[Op]:
        while self.steps < self.length:
            self.step()
        return self.ops

    def choices(self) -> list[tuple[float, str, int | None]]:
        options: list[tuple[float, str, int | None]] = [
            (22, "send", None), (6, "burst", None), (3, "send_loose", None),
            (7, "settle", None), (2.5, "check", None),
            (2, "restart", None), (2, "kill", None), (1.2, "kill_midway", None),
        ]
        for index, slot in enumerate(self.slots):
            if slot.sub is None:
                options.append((10 / len(self.slots), "subscribe", index))
            else:
                options.append((1.5, "unsubscribe", index))
                if slot.sub["ack"] != "auto":
                    options.append((9, "ack", index))
                    options.append((2, "nack", index))
            if slot.connected:
                options.append((1, "disconnect", index))
                options.append((1.2, "drop", index))
                if slot.tx is None:
                    options.append((1.5, "begin", index))
                else:
                    options.append((3, "tx_send", index))
                    if slot.sub is not None and slot.sub["ack"] != "auto":
                        options.append((2.5, "tx_ack", index))
                    options.append((2, "commit", index))
                    options.append((0.7, "abort", index))
        if self.durables:
            options.append((0.6, "destroy_durable", None))
        if self.sent:
            options.append((1.5, "resend", None))
        return options

    def step(self) -> None:
        options = self.choices()
        weights = [weight for weight, _, _ in options]
        _, kind, slot = self.rnd.choices(options, weights)[0]
        getattr(self, f"op_{kind}")(slot)
        admin = random.Random(f"{self.seed}-{self.steps}-admin")
        if admin.random() < ADMIN_SHARE:
            self.emit("purge", dest=admin.choice(self.queues))
            self.side_ops += 1
        self.stream_step(random.Random(f"{self.seed}-{self.steps}-stream"))

    def stream_step(self, rnd: random.Random) -> None:
        """The streaming reader's share: SENDs to its queue from any slot (the slot's state
        as the generator knows it is left alone: the runner connects on demand), and reads
        of a range, most often committed, whole or in slices (`size`)."""
        if rnd.random() < STREAM_SEND_SHARE:
            persistent = rnd.random() < 0.85
            self.emit("send", slot=rnd.randrange(len(self.slots)), dest=STREAM_QUEUE, mid=self.mid("s"),
                      color=rnd.choice(COLORS), no_receipt=rnd.random() < 0.15, non_persistent=not persistent)
            self.side_ops += 1
        if rnd.random() < STREAM_READ_SHARE:
            most = rnd.choice([None, None, 1, 2, 3, 5])
            self.emit("stream", commit=rnd.random() < 0.8, most=most,
                      size=rnd.choice([None, 1, 2]) if most is not None else None)
            self.side_ops += 1

    def any_slot(self) -> int:
        index = self.rnd.randrange(len(self.slots))
        self.slots[index].connected = True
        return index

    def op_send(self, _slot: int | None) -> None:
        dest, mid, color = self.dest(), self.mid(), self.color()
        self.sent.append((dest, mid, color))
        self.emit("send", slot=self.any_slot(), dest=dest, mid=mid, color=color)

    def op_resend(self, _slot: int | None) -> None:
        """A producer retries a receipted SEND with the same duplicate id (`_AMQ_DUPL_ID`)."""
        dest, mid, color = self.rnd.choice(self.sent)
        self.emit("resend", slot=self.any_slot(), dest=dest, mid=mid, color=color)

    def op_send_loose(self, _slot: int | None) -> None:
        """A SEND without receipt, or a non-persistent one: the model may not insist on it."""
        persistent = self.rnd.random() < 0.6
        self.emit("send", slot=self.any_slot(), dest=self.dest(), mid=self.mid(), color=self.color(),
                  no_receipt=persistent or self.rnd.random() < 0.5, non_persistent=not persistent)

    def op_burst(self, _slot: int | None) -> None:
        count = self.rnd.randint(3, 12)
        dest, mid = self.dest(), self.mid()
        colors = [self.color() for _ in range(count)]
        self.sent.extend((dest, f"{mid}-{n}", color) for n, color in enumerate(colors))
        self.emit("burst", slot=self.any_slot(), dest=dest, mid=mid, colors=colors,
                  dup_ids=self.rnd.random() < 0.5, one_write=self.rnd.random() < 0.7)

    def op_settle(self, _slot: int | None) -> None:
        self.emit("settle")

    def op_check(self, _slot: int | None) -> None:
        self.emit("check")

    def _all_gone(self) -> None:
        for slot in self.slots:
            slot.connected = False
            slot.sub = None
            slot.tx = None

    def op_restart(self, _slot: int | None) -> None:
        self.emit("restart")
        self._all_gone()

    def op_kill(self, _slot: int | None) -> None:
        self.emit("kill")
        self._all_gone()

    def op_kill_midway(self, _slot: int | None) -> None:
        """Receipted sends and ACKs still in flight when the broker is killed."""
        count = self.rnd.randint(2, 10)
        args = {"slot": self.any_slot(), "dest": self.dest(), "mid": self.mid(),
                "colors": [self.color() for _ in range(count)], "acks": self.rnd.random() < 0.6}
        # How long the broker gets before it dies, and whether it is SIGTERM instead: drawn
        # from their own stream (added later; earlier seeds keep their programs otherwise).
        extra = random.Random(f"{self.seed}-{self.steps}-midway")
        args["delay_ms"] = extra.choice([0, 0, 2, 5, 10, 20])
        args["graceful"] = extra.random() < 0.3
        self.emit("kill_midway", **args)
        self._all_gone()

    def op_subscribe(self, index: int | None) -> None:
        assert index is not None
        rnd = self.rnd
        slot = self.slots[index]
        dest = self.dest()
        ack = rnd.choices(ACK_MODES, [1, 1.4, 1.6])[0]
        prefetch = rnd.randint(1, 5) if rnd.random() < 0.7 else 1000
        selector = rnd.choice(list(SELECTORS)) if rnd.random() < 0.35 else None
        durable = None
        if dest.startswith("/topic/") and rnd.random() < 0.65:
            durable = rnd.choice(["d0", "d1"])
            key = (index, dest, durable)
            if key in self.durables and rnd.random() < 0.85:
                selector = self.durables[key]  # the same subscription, returning
            self.durables[key] = selector
        slot.connected = True
        slot.sub = {"dest": dest, "ack": ack, "durable": durable}
        self.emit("subscribe", slot=index, dest=dest, ack=ack, prefetch=prefetch, selector=selector,
                  durable=durable)

    def op_unsubscribe(self, index: int | None) -> None:
        assert index is not None
        self.slots[index].sub = None
        self.emit("unsubscribe", slot=index)

    def op_ack(self, index: int | None) -> None:
        self.emit("ack", slot=index, pick=self.pick(), receipt=self.rnd.random() < 0.7)

    def op_nack(self, index: int | None) -> None:
        self.emit("nack", slot=index, pick=self.pick(), receipt=self.rnd.random() < 0.5)

    def op_disconnect(self, index: int | None) -> None:
        assert index is not None
        slot = self.slots[index]
        slot.connected, slot.sub, slot.tx = False, None, None
        self.emit("disconnect", slot=index)

    def op_drop(self, index: int | None) -> None:
        assert index is not None
        slot = self.slots[index]
        slot.connected, slot.sub, slot.tx = False, None, None
        self.emit("drop", slot=index)

    def op_begin(self, index: int | None) -> None:
        assert index is not None
        self.slots[index].tx = f"tx{self.next_tx}"
        self.next_tx += 1
        self.emit("begin", slot=index)

    def op_tx_send(self, index: int | None) -> None:
        self.emit("tx_send", slot=index, dest=self.dest(), mid=self.mid(), color=self.color())

    def op_tx_ack(self, index: int | None) -> None:
        # NACK inside a transaction came later: drawn from its own stream, so the programs of
        # seeds reported before it are unchanged but for some tx_ack becoming a NACK.
        if random.Random(f"{self.seed}-{self.steps}").random() < 0.3:
            self.emit("tx_ack", slot=index, pick=self.pick(), nack=True)
        else:
            self.emit("tx_ack", slot=index, pick=self.pick())

    def op_commit(self, index: int | None) -> None:
        assert index is not None
        self.slots[index].tx = None
        self.emit("commit", slot=index, no_receipt=self.rnd.random() < 0.15)

    def op_abort(self, index: int | None) -> None:
        assert index is not None
        self.slots[index].tx = None
        self.emit("abort", slot=index)

    def op_destroy_durable(self, _slot: int | None) -> None:
        key = self.rnd.choice(sorted(self.durables, key=str))
        index, topic, name = key
        del self.durables[key]
        slot = self.slots[index]
        if slot.sub is not None and slot.sub["durable"] == name and slot.sub["dest"] == topic:
            slot.sub = None
        slot.connected = True
        self.emit("destroy_durable", slot=index, dest=topic, durable=name)


def generate(seed: int, length: int | None = None) -> Program:
    """The program of this seed: its broker config, body size and operations."""
    rnd = random.Random(f"config-{seed}")
    config = _draw_config(rnd)
    body_size = rnd.choice([40, 200, 200, 700, 1500])
    final = "kill" if rnd.random() < 0.4 else "restart"
    ops = _Generator(seed, length if length is not None else rnd.randint(30, 70)).run()
    return Program(seed, config, body_size, ops, final)
