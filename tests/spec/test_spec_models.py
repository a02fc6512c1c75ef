"""Every tier-ci model in spec/models.yaml gets TLC's expected verdict.

Models added to the manifest later are picked up automatically. A model that
encodes a claim TLC should refute (expect: violation) passes only when TLC finds
a counterexample to exactly the named invariant. TLC that cannot run (no Java,
no jar) fails these tests: a spec that was not checked is not a passing spec.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from korvet.verification import tlc
from korvet.verification.cli import format_trace
from tests.support import tlc_runs

CI_MODELS = [m for m in tlc.load_models(tlc.spec_dir()) if m.tier == "ci"]


def _report(result: tlc.TlcResult) -> str:
    model = result.model
    wanted = "pass" if model.expect == "pass" else f"violation of {model.expect_invariant}"
    lines = [
        f"{model.name} ({model.module}.tla, {model.config}): TLC said {result.outcome}"
        f"{': ' + result.violated if result.violated else ''}; expected {wanted}",
        f"  {result.generated:,} states generated, {result.distinct:,} distinct, depth "
        f"{result.depth}, {result.wall_seconds:.1f}s, exit code {result.exit_code}",
    ]
    lines.extend(f"  TLC error: {error}" for error in result.errors)
    if result.trace:
        lines.append(format_trace(result))
    return "\n".join(lines)


# What a model's verdict checks beyond what its config names (its specification, invariants,
# properties, constraint and view): the names of spec/README.md's rows the model is the
# test of. A refuted claim lists the constants it turns; a model the spec has no other test
# for, its variables and actions.
COVERS = {
    "RedisStarIds-SeedClaim": ("StarId", "XAddStar", "Tick", "TypeOK"),
    # SyncRepliesFromLeader and CommitsAccepted hold these two over every step's `out`
    **dict.fromkeys(("GroupCoordinator", "GroupCoordinator-replay"), (
        "SyncRepliesCarryLeaderAssignment", "StaleCommitNeverStored")),
    "ProducerState-StateLostWithRecords": ("SurvivesRetention",),
    "PartitionLog-ReadAheadUnchecked": ("ReadAheadChecked", "PrepRange", "PrepBounds",
                                        "UsePrepared", "Expire"),
    "PartitionLog-ReadAheadAnyOffset": ("ReadAheadSameOffset",),
    "GroupCoordinator-liveness": (
        "LiveInit", "LiveNext", "Perturb", "Crash", "Budget", "PerturbKinds", "AllPerturbKinds",
        "ClientStart", "ClientJoin", "ClientSync", "ClientHeartbeat", "Owes", "Coordinator",
        "SessionsArmed", "HeartbeatsAccepted", "JoinTimerArmed", "SyncTimerArmed", "Armed",
        "TimerSession", "TimerJoin", "TimerJoinIdle", "TimerSync", "TimerPending", "Cleanup",
        "Tick", "TimeCanPass", "JoinsAnswered", "SyncsAnswered"),
    "GroupCoordinator-liveness-no-rearm": ("SessionsArmed", "HeartbeatsAccepted"),
    **dict.fromkeys(("GroupCoordinatorDurable", "GroupCoordinatorDurable-Everysec"), (
        "phase", "Step", "saved", "dur", "disk", "Persist", "Replies", "PersistFails",
        "Unavailable", "Parked", "RedisCrash", "RedisRestart", "Fsync", "redisLife", "Stride",
        "FsyncEveryWrite", "WriteMayFail", "RaiseAfterLoss", "MaxCrashes", "seenGen", "seenAsg",
        "behind", "rolledBack", "wire")),
    "GroupCoordinatorDurable-Everysec-NoRaise": ("RaiseAfterLoss",),
    "GroupCoordinatorDurable-Everysec-Rollback": ("FsyncEveryWrite",),
    "StreamGroup": ("FetchBy", "LostResponses", "Seeks", "Rebalances", "Restarts", "len", "owner",
                    "pos", "committed", "rgExists", "rgLast", "initialized", "Fetch", "Commit",
                    "Seek", "Rebalance", "Restart", "Produce"),
    "StreamGroup-SeedClaim-LostResponse": ("FetchBy", "LostResponses"),
    "StreamGroup-SeedClaim-Seek": ("FetchBy", "Seeks"),
    "StreamGroup-SeedClaim-Rebalance": ("FetchBy", "Rebalances"),
    "StreamGroup-SeedClaim-Literal": ("FetchBy", "CreateAt"),
    "CoordinatorLease": ("Drift",),
    "CoordinatorLease-takeovers": ("MaxToken", "MaxTime", "MaxDeletes", "Delete", "CleanUp"),
    "CoordinatorLease-Unfenced": ("Fenced",),
    "CoordinatorLease-Unfenced-OneWriter": ("Fenced",),
    "CoordinatorLease-NoMargin": ("Drift", "Margin"),
    "CoordinatorLease-mutant-CleanUpUnfenced": ("CleanUp", "Fenced"),
    "CoordinatorLease-mutant-AdoptWithoutSnapshot": ("Acquire",),
    "CoordinatorLease-mutant-LostWriteKeepsLease": ("Lose",),
    "CoordinatorLease-mutant-RenewOnBrokerClock": ("Renew",),
}
_OPERATORS = re.compile(r"^(?:SPECIFICATION|INIT|NEXT|CONSTRAINT|VIEW)\s+(\w+)", re.M)


def _case(model: tlc.Model) -> Any:
    """A model's verdict, marked with the spec names it checks (spec/README.md lists it)."""
    extra = COVERS.get(model.name, ())
    if model.expect == "violation":
        mark = pytest.mark.spec(model.module, model.expect_invariant, *extra,
                                note=f"expected violation of {model.expect_invariant}")
    else:
        config = tlc.spec_dir() / model.config
        names = (*_OPERATORS.findall(config.read_text()), *tlc.read_invariants(config),
                 *tlc.read_properties(config), *extra)
        mark = pytest.mark.spec(model.module, *dict.fromkeys(names))
    return pytest.param(model, id=model.name, marks=mark)


@pytest.mark.tlc
@pytest.mark.parametrize("model", [_case(m) for m in CI_MODELS])
def test_model_has_expected_verdict(model: tlc.Model) -> None:
    result = tlc_runs.run(model)
    assert result.as_expected, _report(result)
    # TLC explored states; a property an initial state violates stops it before it counts
    # one, and then the trace it printed (that initial state) shows it ran the model
    initial = result.outcome == "violation" and len(result.trace) == 1
    assert result.distinct > 0 or initial, _report(result)
    if model.expect == "violation":
        # The evidence for a refuted claim is its counterexample: it must be there.
        assert result.trace, _report(result)
    else:
        # Every action of a passing model fires (TLC's coverage), but those the model turns
        # off by design and says so (models.yaml `unexercised`, with why): a rule no
        # behaviour of the model takes is a rule the model does not check. A model whose
        # coverage TLC cannot afford says why (models.yaml `no_coverage`).
        if model.no_coverage:
            assert not result.coverage, f"{model.name}: coverage taken although declared not"
            return
        assert result.coverage, f"{model.name}: TLC reported no action coverage"
        assert result.never_fired == sorted(name for name, _ in model.unexercised), (
            f"{model.name}: actions that never fired {result.never_fired}, declared "
            f"unexercised {sorted(name for name, _ in model.unexercised)}; coverage "
            f"{result.coverage}")


def _checked(model: tlc.Model) -> list[str]:
    config = tlc.spec_dir() / model.config
    return [*tlc.read_invariants(config), *tlc.read_properties(config)]


def test_every_property_of_every_spec_has_a_model_that_breaks_it() -> None:
    """An invariant or temporal property that no model can violate may be true by
    construction and then proves nothing: each one a passing model checks must be the
    expected violation of a tier-ci model of the same module (a mutant of the spec, or a
    refuted claim), which test_model_has_expected_verdict runs."""
    models = tlc.load_models(tlc.spec_dir())
    missing: list[str] = []
    for module in sorted({m.module for m in models if m.expect == "pass"}):
        wanted = {name for m in models if m.module == module and m.expect == "pass"
                  for name in _checked(m)}
        broken = {m.expect_invariant for m in models
                  if m.module == module and m.expect == "violation" and m.tier == "ci"}
        missing.extend(f"{module}.{name}" for name in sorted(wanted - broken))
    assert sorted(missing) == sorted(NO_MUTANT_YET), (
        f"properties no ci model breaks: {', '.join(missing)} (the known ones, still to do: "
        f"{', '.join(NO_MUTANT_YET)}); a property that gained a mutant leaves NO_MUTANT_YET")


# Properties of passing models that no model breaks yet: a ratchet that may only shrink, and is
# empty since every property gained its mutant (issue 36); a new property needs its mutant at once.
NO_MUTANT_YET: tuple[str, ...] = ()


def test_a_mutant_applies_its_edits_once_and_checks_one_property() -> None:
    """A mutant whose text no longer occurs in its spec (or occurs twice) is an error, not a
    silent check of the unchanged spec; and its config is narrowed to the one property."""
    spec = tlc.spec_dir()
    first_line = (spec / "OffsetCodec.tla").read_text().splitlines()[0]

    def mutant(replace: str, by: str) -> tlc.Model:
        return tlc.Model(name="m", module="OffsetCodec", config="OffsetCodec.cfg",
                         expect="violation", expect_invariant="RoundTrip", check_only="RoundTrip",
                         mutation=(tlc.Edit("OffsetCodec.tla", replace, by),))

    with tlc.prepared(mutant(first_line, first_line + " "), spec) as folder:
        assert folder != spec
        assert (folder / "OffsetCodec.tla").read_text().splitlines()[0] == first_line + " "
        assert (spec / "OffsetCodec.tla").read_text().splitlines()[0] == first_line
        narrowed = folder / "OffsetCodec.cfg"
        assert tlc.read_invariants(narrowed) == ["RoundTrip"]
        assert tlc.read_properties(narrowed) == []
    for replace in ("no such text in the spec", "\n"):  # absent; many times
        with pytest.raises(tlc.TlcError, match="occurs"), tlc.prepared(mutant(replace, "x"), spec):
            pass


def test_a_spec_that_does_not_parse_is_an_error_that_says_where() -> None:
    """A parse failure is reported with SANY's own words (module, line, column), not only
    TLC's "Parsing or semantic analysis failed": a CI run once failed on that line alone."""
    spec = tlc.spec_dir()
    first_line = (spec / "OffsetCodec.tla").read_text().splitlines()[0]
    broken = tlc.Model(name="m", module="OffsetCodec", config="OffsetCodec.cfg", expect="pass",
                       mutation=(tlc.Edit("OffsetCodec.tla", first_line, first_line + " )("),))
    result = tlc.run_model(broken, spec, workers="1")
    assert result.outcome == "error"
    assert result.errors[0].startswith("[3002]")
    assert "Parse Error" in result.errors[1] and "line 1" in result.errors[1], result.errors


def test_tlc_reads_the_standard_modules_from_a_folder_of_its_own() -> None:
    """SANY copies Naturals.tla, Sequences.tla, ... out of the jar into java.io.tmpdir under
    their plain names, truncating first: TLC processes sharing /tmp (the suite runs many at
    once) could read one another's half-written copy and fail to parse (a CI run did). With
    /tmp/Sequences.tla made unwritable (a folder of that name), a model that extends Sequences
    still checks: its TLC writes its copies elsewhere."""
    blocker = Path(tempfile.gettempdir()) / "Sequences.tla"
    made = not blocker.exists()
    if made:
        blocker.mkdir()
    try:
        model = next(m for m in CI_MODELS if m.name == "OffsetCodec")
        assert "Sequences" in (tlc.spec_dir() / "OffsetCodec.tla").read_text()
        result = tlc.run_model(model, tlc.spec_dir(), workers="1")
        assert result.outcome == "pass", result.errors
    finally:
        if made:
            blocker.rmdir()


def test_the_manifest_lists_ci_models() -> None:
    assert CI_MODELS, "spec/models.yaml lists no tier-ci model"


ALL_PERTURB_KINDS = frozenset({"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                               "DeleteGroups", "Restart", "Crash"})


def test_group_coordinator_descriptions_match_their_configs() -> None:
    """What models.yaml says a model covers is what its config binds: the generations a
    CONSTRAINT model explores (MaxGeneration), the perturbations a liveness model allows
    (Budget, and PerturbKinds: each kind named, or "every kind") and the generations that
    bounds (GenerationBounded: 0..2*Budget+1)."""
    models = [m for m in tlc.load_models(tlc.spec_dir())
              if m.module in ("GroupCoordinator", "GroupCoordinatorLive")]
    assert models
    for model in models:
        constants = tlc.read_constants(tlc.spec_dir() / model.config)
        if model.module == "GroupCoordinatorLive":
            budget = constants["Budget"]
            assert isinstance(budget, int)
            plural = "" if budget == 1 else "s"
            wanted = [f"{budget} perturbation{plural}", f"generations 0..{2 * budget + 1}"]
            kinds = constants["PerturbKinds"]
            assert isinstance(kinds, frozenset) and kinds <= ALL_PERTURB_KINDS, (model.name, kinds)
            if kinds == ALL_PERTURB_KINDS:
                wanted.append("every kind of perturbation")
            else:
                wanted.extend(sorted(str(kind) for kind in kinds))
            if model.expect == "violation":
                wanted = []
        else:
            wanted = [f"generations 0..{constants['MaxGeneration']}"]
        for text in wanted:
            assert text in model.description, (model.name, text, model.description)


def test_a_temporal_violation_is_named_after_the_one_property_checked() -> None:
    """TLC says only "Temporal properties were violated"; a model that checks one property
    (the stuck-join mutant) gets it named, so expect_invariant can say which one failed.
    A model that checks several keeps TLC's words: naming one of them would be a guess."""
    spec = tlc.spec_dir()
    assert tlc.read_properties(spec / "GroupCoordinatorLiveStuckJoin.cfg") == ["JoinsAnswered"]
    live_properties = tlc.read_properties(spec / "GroupCoordinatorLive.cfg")
    assert {"HeldBackAnswered", "RebalanceCompletes", "TimePasses"} <= set(live_properties)
    for config, wanted in (("GroupCoordinatorLiveStuckJoin.cfg", "Temporal property JoinsAnswered"),
                           ("GroupCoordinatorLive.cfg", "Temporal property Temporal properties "
                                                        "were violated.")):
        model = tlc.Model(name="m", module="GroupCoordinatorLive", config=config,
                          expect="violation",
                          expect_invariant="JoinsAnswered" if "Stuck" in config else "RebalanceCompletes")
        output = ("@!@!@STARTMSG 2116:1 @!@!@\nTemporal properties were violated.\n"
                  "@!@!@ENDMSG 2116 @!@!@\n")
        result = tlc.interpret(model, output, 12, 1.0)
        tlc.name_temporal_violation(result, spec / config)
        assert result.violated == wanted
        assert result.as_expected == (config == "GroupCoordinatorLiveStuckJoin.cfg")


def test_an_action_property_violation_is_read_as_that_propertys_violation() -> None:
    """A [][A]_v property (DenseLog's NoSilentSkip) is reported by TLC with its own message,
    naming the property: its mutant is a violation of that property, not a TLC error."""
    model = tlc.Model(name="m", module="DenseLog", config="DenseLogConsumer.cfg",
                      expect="violation", expect_invariant="NoSilentSkip")
    output = ("@!@!@STARTMSG 2112:1 @!@!@\nAction property NoSilentSkip is violated.\n"
              "@!@!@ENDMSG 2112 @!@!@\n")
    result = tlc.interpret(model, output, 13, 1.0)
    assert (result.outcome, result.violated) == ("violation", "Temporal property NoSilentSkip")
    assert result.as_expected
    other = tlc.Model(name="m", module="DenseLog", config="DenseLogConsumer.cfg",
                      expect="violation", expect_invariant="Dense")
    assert not tlc.interpret(other, output, 13, 1.0).as_expected


@pytest.mark.spec("GroupCoordinatorLive", "HeldBackAnswered", "JoinsAnswered", "SyncsAnswered")
def test_every_liveness_model_checks_that_held_back_requests_are_answered() -> None:
    """JoinsAnswered and SyncsAnswered hold in every liveness model expected to pass: checked
    as properties, or (GroupCoordinator-liveness, where their leads-to branches took 27 of
    the model's 40 s under TLC) derived from RebalanceCompletes and the invariant
    SettledHoldsNothing, as GroupCoordinatorLive.tla argues."""
    spec = tlc.spec_dir()
    live = [m for m in tlc.load_models(spec)
            if m.module == "GroupCoordinatorLive" and m.expect == "pass"]
    assert {m.name for m in live} >= {"GroupCoordinator-liveness"}
    for model in live:
        properties = set(tlc.read_properties(spec / model.config))
        invariants = set(tlc.read_invariants(spec / model.config))
        derived = "RebalanceCompletes" in properties and "SettledHoldsNothing" in invariants
        for wanted in ("JoinsAnswered", "SyncsAnswered"):
            assert wanted in properties or derived, (model.name, wanted)
    # ... and the lemma's parts say what the argument needs.
    text = " ".join((spec / "GroupCoordinatorLive.tla").read_text().split())
    for definition in (r"SettledHoldsNothing == Settled => \A m \in Ids : ~HeldJoin(m) /\ ~HeldSync(m)",
                       "RebalanceCompletes == <>[]Settled",
                       r"JoinsAnswered == \A m \in Ids : HeldJoin(m) ~> ~HeldJoin(m)",
                       r"SyncsAnswered == \A m \in Ids : HeldSync(m) ~> ~HeldSync(m)"):
        assert definition in text, definition


def test_the_replayed_models_are_checked_here() -> None:
    """A model in tlc_runs.DUMPED gets its verdict from the run that dumps its graph for a
    replay: it must be a ci model expected to pass, so that the verdict test above checks
    it and the replay walks a graph TLC found nothing wrong in."""
    ci = {m.name: m for m in CI_MODELS}
    assert ci.keys() >= tlc_runs.DUMPED, tlc_runs.DUMPED - ci.keys()
    assert all(ci[name].expect == "pass" for name in tlc_runs.DUMPED)


def test_a_dumped_graph_is_read_back_with_its_escapes_and_shared_values() -> None:
    """parse_dot reads TLC's -dump dot: the initial states (filled), each edge's action, and
    labels with escaped quotes and line breaks; equal value texts give equal values."""
    dot = "\n".join([
        "strict digraph DiskGraph {",
        '1 [label="/\\\\ s = \\"a\\"\\n/\\\\ n = <<1, 2>>",style = filled]',
        '1 -> 2 [label="Step",color="black",fontcolor="black"];',
        '2 [label="/\\\\ s = \\"q\\"\\n/\\\\ n = <<1, 2>>"];',
        '2 -> 1 [label="Back",color="black",fontcolor="black"];',
        "}"])
    states, initial, edges = tlc.parse_dot(dot)
    assert states == {"1": {"s": "a", "n": (1, 2)}, "2": {"s": "q", "n": (1, 2)}}
    assert initial == {"1"}
    assert edges == {"1": [("Step", "2")], "2": [("Back", "1")]}
    assert states["1"]["n"] is states["2"]["n"]
