"""`korvet spec test-live`: property-based runs against a live broker, the spec's machines
as the oracle (docs/spec/live-testing.md).

Hypothesis generates request sequences; each request goes to the broker and, at the same
time, through the machine; every reply must be one the machine allows, every request it
holds back must stay unanswered, every one it releases must be answered. A failure is
shrunk to a short sequence, printed as a request script and written to --script-out;
--replay FILE runs a script again.

Korvet: start it with --groups-test-clock and give --test-clock http://HOST:HTTP_PORT to
let runs move its coordinator's clock (timeouts fire); and with
--groups-initial-rebalance-delay-ms 0, as Apache Kafka with
group.initial.rebalance.delay.ms=0 (or pass --initial-rebalance-delay-ms).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from korvet.verification.live.actions import Script
from korvet.verification.live.env import Divergence, Environment, LiveError, Stats, connect


def add_parser(spec_commands: Any) -> None:
    live = spec_commands.add_parser(
        "test-live", help="property-based runs against a live broker, the machines as oracle",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    live.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    live.add_argument("--part", choices=("groups", "storage", "transactions", "share", "all"),
                      default="all",
                      help="the group protocol, the storage path (produce/fetch/list-offsets), "
                           "transactions (v2: InitProducerId, Produce, TxnOffsetCommit, EndTxn, "
                           "read_committed reads), share groups (ShareFetch, ShareAcknowledge), "
                           "or all four (default)")
    live.add_argument("--members", type=int, default=3, help="simulated group members (3)")
    live.add_argument("--examples", type=int, default=25,
                      help="request sequences per part (25)")
    live.add_argument("--steps", type=int, default=30, help="actions per sequence, at most (30)")
    live.add_argument("--seed", type=int, help="seed for Hypothesis (a run is repeatable)")
    live.add_argument("--replay", metavar="FILE", help="run this request script again")
    live.add_argument("--shrink-seconds", type=float, default=60.0,
                      help="how long a failure may be shrunk by replaying it (60)")
    live.add_argument("--script-out", metavar="FILE", default="live-failure.json",
                      help="where a failing run's shrunk script goes (live-failure.json)")
    live.add_argument("--rules", choices=("auto", "korvet", "kafka"), default="auto",
                      help="whose rules where Korvet and Kafka deliberately differ (auto: Kafka's "
                           "if the broker serves ConsumerGroupHeartbeat)")
    live.add_argument("--test-clock", metavar="URL",
                      help="Korvet's HTTP endpoint with --groups-test-clock on: runs may move "
                           "the coordinator's clock")
    live.add_argument("--initial-rebalance-delay-ms", type=int, default=0,
                      help="the broker's group.initial.rebalance.delay.ms (0)")
    live.add_argument("--group-max-size", type=int, default=2**31 - 1,
                      help="the broker's group.max.size")
    live.add_argument("--json", action="store_true", help="print the figures as JSON")
    live.set_defaults(func=run)


def _setup(args: argparse.Namespace) -> Environment:
    return connect(args.bootstrap, flavour=args.rules, clock_url=args.test_clock,
                   initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
                   group_max_size=args.group_max_size)


def run(args: argparse.Namespace) -> int:
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("korvet spec test-live needs Hypothesis: pip install 'korvet[conformance]'",
              file=sys.stderr)
        return 2
    if not 1 <= args.members <= 8:
        print("korvet spec test-live: --members must be within 1..8", file=sys.stderr)
        return 2
    try:
        env = _setup(args)
    except LiveError as exc:
        print(f"korvet spec test-live: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    if args.replay:
        return _replay(env, Path(args.replay), args.json)
    return _generate(env, args, started)


def _replay(env: Environment, path: Path, as_json: bool) -> int:
    from korvet.verification.live import machine, share, storage, transactions

    try:
        script = Script.load(path)
    except (OSError, ValueError) as exc:
        print(f"korvet spec test-live: {path}: {exc}", file=sys.stderr)
        return 2
    try:
        if script.part == "storage":
            storage.replay_storage(env, script)
        elif script.part == "transactions":
            transactions.replay_transactions(env, script)
        elif script.part == "share":
            share.replay_share(env, script)
        else:
            machine.replay_groups(env, script)
    except Divergence as exc:
        print(f"DIFFERENCE on replay of {path}:\n{exc}")
        return 1
    print(f"replayed {len(script.actions)} actions of {path}: no difference")
    _print_stats({script.part: env.stats}, as_json)
    return 0


def _generate(env: Environment, args: argparse.Namespace, started: float) -> int:
    from korvet.verification.live import machine, share, storage, transactions

    parts = ("groups", "storage", "transactions", "share") if args.part == "all" \
        else (args.part,)
    figures: dict[str, Stats] = {}
    for part in parts:
        env.stats = Stats()
        figures[part] = env.stats
        print(f"{part}: {args.examples} sequences of up to {args.steps} actions against "
              f"{args.bootstrap} ({env.flavour.value}'s rules"
              f"{', test clock' if env.clock else ''})", flush=True)
        try:
            if part == "groups":
                machine.run_groups(env, members=args.members, examples=args.examples,
                                   steps=args.steps, seed=args.seed,
                                   shrink_seconds=args.shrink_seconds)
            elif part == "storage":
                storage.run_storage(env, examples=args.examples, steps=args.steps,
                                    seed=args.seed, shrink_seconds=args.shrink_seconds)
            elif part == "transactions":
                transactions.run_transactions(env, examples=args.examples, steps=args.steps,
                                              seed=args.seed, shrink_seconds=args.shrink_seconds)
            else:
                share.run_share(env, examples=args.examples, steps=args.steps, seed=args.seed,
                                shrink_seconds=args.shrink_seconds)
        except LiveError as exc:
            print(f"korvet spec test-live: {exc}", file=sys.stderr)
            return 2
        except machine.LiveFailure as exc:
            Path(args.script_out).write_text(exc.script.dumps())
            print(f"\nDIFFERENCE ({part}):\n{exc}\n\nshrunk request script "
                  f"({len(exc.script.actions)} actions), written to {args.script_out}:\n"
                  f"{exc.script.dumps()}\nrun it again: korvet spec test-live --bootstrap "
                  f"{args.bootstrap} --replay {args.script_out}")
            _print_stats(figures, args.json)
            return 1
    print(f"no difference in {time.monotonic() - started:.1f} s")
    _print_stats(figures, args.json)
    return 0


def _print_stats(figures: dict[str, Stats], as_json: bool) -> None:
    if as_json:
        print(json.dumps({part: s.as_dict() for part, s in figures.items()}, indent=2))
        return
    for part, s in figures.items():
        print(f"{part}: {s.sequences} sequences, {s.steps} steps ({s.skipped} skipped), "
              f"{s.requests} requests, {s.replies_compared} replies compared, "
              f"{s.held_back_confirmed} held back as predicted, {s.clock_moves} clock moves, "
              f"{s.leader_choices} leaders chosen among several")
        if s.kafka_rules:
            label = ("rules exercised" if part in ("transactions", "share")
                     else "Kafka's rule used where Korvet differs")
            print(f"  {label}: " + ", ".join(
                f"{name} ({count})" for name, count in sorted(s.kafka_rules.items())))
        if s.errors_seen:
            print("  error codes answered: " + ", ".join(
                f"{name} {count}" for name, count in sorted(s.errors_seen.items())))
