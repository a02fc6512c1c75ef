"""One TLC run per model per test session, shared by the verdict test and the replays.

A model that a replay walks (``DUMPED``) used to be checked twice in a run of the suite:
once by tests/spec/test_spec_models.py for its verdict, once more with ``-dump dot`` by the
replay for its state graph. Here TLC checks it once, with the dump, and both read that
run: the verdict test asserts the same verdict on the same TLC result, the replay walks
the same graph.

The run is shared through a folder that lives as long as the test session
(``KORVET_TLC_RUNS``, made by tests/conftest.py on the controller and seen by every
xdist worker): one sub-folder per model with TLC's result and the dump, written under a
file lock, so the worker that gets there first runs TLC and the other waits for it and
reads what it wrote. Nothing outlives the session: a later run checks every model again.
Without the variable (a test run outside the suite's conftest) each caller runs TLC itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

from korvet.verification import tlc

SHARE_ENV = "KORVET_TLC_RUNS"

# The models a replay walks (tests/spec/test_spec_models.py checks that each is a ci model
# expected to pass): their verdict run is the run that dumps the graph.
DUMPED = frozenset({
    "OffsetCodec",  # tests/spec/OffsetCodec/test_offset_replay.py
    "ProducerState",  # tests/spec/ProducerState/test_producer_state_replay.py
    "ProducerState-batches",  # same
    "PartitionLog",  # tests/spec/PartitionLog/test_partition_log_replay.py
    "PartitionLog-approximate",  # same
    "PartitionLog-approximate-consumer",  # same
    "GroupCoordinator-replay",  # tests/spec/GroupCoordinator/test_coordinator_replay.py
    "CoordinatorLease-replay",  # tests/spec/CoordinatorLease/test_lease_replay.py
    "CoordinatorLease-replay-takeovers",  # same
    "DenseLog",  # tests/spec/DenseLog/test_dense_log_replay.py
    "DenseLog-batches",  # same
    "DenseLog-consumer",  # same
    "Compaction-replay",  # tests/spec/Compaction/test_compaction_replay.py
    "Compaction-replay-delete",  # same
    "Transactions",  # tests/spec/Transactions/test_transactions_replay.py
    "Transactions-replay",  # same
    "Transactions-replay-takeover",  # same
    "SharePartitionRedis",  # tests/spec/SharePartitionRedis/test_share_replay.py
})


_memo: dict[str, tlc.TlcResult] = {}
_private: list[tempfile.TemporaryDirectory[str]] = []  # without KORVET_TLC_RUNS: this process's


def model(name: str) -> tlc.Model:
    found = next((m for m in tlc.load_models(tlc.spec_dir()) if m.name == name), None)
    assert found is not None, f"spec/models.yaml has no model named {name}"
    return found


def _folder(name: str) -> Path:
    share = os.environ.get(SHARE_ENV)
    if not share:
        if not _private:
            _private.append(tempfile.TemporaryDirectory(prefix="korvet-tlc-runs-"))
        share = _private[0].name
    return Path(share) / name


def run(checked: tlc.Model, *, dump: bool | None = None) -> tlc.TlcResult:
    """TLC's verdict on ``checked`` in this session: for a model in DUMPED (or with
    ``dump``), from the one run that also dumped its state graph."""
    dumps = checked.name in DUMPED if dump is None else dump
    key = checked.name + (".dump" if dumps else "")
    if key not in _memo:
        folder = _folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (folder / "run.json").is_file():
                _run(checked, folder, dumps)
        meta = json.loads((folder / "run.json").read_text())
        _memo[key] = tlc.interpret_run(checked, tlc.spec_dir(), (folder / "output.txt").read_text(),
                                       int(meta["exit_code"]), float(meta["wall"]))
    return _memo[key]


def state_graph(name: str) -> tuple[tlc.StateGraph, str]:
    """The whole reachable graph of a model and the dot text it was read from (for a
    model not in DUMPED, from a run of its own)."""
    checked = model(name)
    result = run(checked, dump=True)
    if result.outcome == "error":
        raise tlc.TlcError("TLC failed while dumping the state graph: " + "; ".join(result.errors))
    text = (_folder(f"{name}.dump") / "graph.dot").read_text()
    states, initial, edges = tlc.parse_dot(text)
    return tlc.StateGraph(states, frozenset(initial), edges, result), text


_passing: dict[str, tlc.StateGraph] = {}


def passing_graph(name: str) -> tlc.StateGraph:
    """The state graph of a model TLC passed, read once per process (the replays walk it
    in many tests)."""
    if name not in _passing:
        graph, _ = state_graph(name)
        assert graph.result.outcome == "pass", (graph.result.violated, graph.result.errors)
        _passing[name] = graph
    return _passing[name]


def _run(checked: tlc.Model, folder: Path, dump: bool) -> None:
    """Run TLC; keep what it wrote (each reader parses it again: parsed TLA+ values hold
    string hashes, which differ between processes) and its dump. A dump is written by
    one TLC worker, as it always was, so that TLC writes each new state right after the
    edge that found it (test_coordinator_replay.discoveries reads that order)."""
    args: tuple[str, ...] = ()
    workers = "auto"
    if dump:
        args, workers = ("-dump", "dot,actionlabels", str(folder / "graph.dot")), "1"
    output, exit_code, wall = tlc.run_tlc(checked, tlc.spec_dir(), workers=workers,
                                          extra_args=args, coverage=True)
    (folder / "output.txt").write_text(output)
    partial = folder / "run.json.part"
    partial.write_text(json.dumps({"exit_code": exit_code, "wall": wall}))
    partial.rename(folder / "run.json")  # last: a run.json means the run is complete
