"""The `korvet` command.

    korvet serve                      run the broker (embedded Redis unless --redis-url)
    korvet spec check [MODULE]        model-check spec/*.tla with TLC
    korvet conformance --bootstrap H:P  the conformance suite against any Kafka-compatible broker
    korvet pipeline ...               the Spark Structured Streaming pipeline (docs/spark.md)
    korvet jars fetch|list|classpath  the pinned JVM jars, resolved by Maven
    korvet users add|list|delete      SASL/SCRAM users (docs/users/security.md)
    korvet faults run|check           fault-injection runs with a history checker (docs/users/fault-runs.md)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from korvet import __version__
from korvet.settings import ConfigError, add_arguments, from_args


def _serve(args: argparse.Namespace) -> int:
    try:
        from korvet.server.app import run
    except ModuleNotFoundError as exc:  # installed without the server extra (korvet[conformance] only)
        print(f"korvet serve: {exc.name} is not installed; the broker needs the server dependencies: "
              "pip install 'korvet[server]'", file=sys.stderr)
        return 2

    try:
        settings = from_args(args)
    except ConfigError as exc:
        print(f"korvet serve: {exc}", file=sys.stderr)
        return 2
    for warning in settings.warnings:
        print(f"korvet serve: warning: {warning}", file=sys.stderr)
    return run(settings)


def _jars(args: argparse.Namespace) -> int:
    from korvet.jvm import maven

    try:
        if args.jars_command == "list":
            print("\n".join(maven.available_sets()))
        elif args.jars_command == "fetch":
            for name in args.sets or maven.available_sets():
                paths = maven.ensure(name)
                print(f"{name}: {len(paths)} jars verified in {maven.jar_root()}", file=sys.stderr)
        elif args.jars_command == "classpath":
            print(maven.classpath(args.set))
        elif args.jars_command == "lock":
            out = maven.lock(args.set, args.coordinates, comment=args.comment, exclude=args.exclude)
            print(f"wrote {out}")
    except maven.JarError as exc:
        print(f"korvet jars: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="korvet",
        description="Kafka-wire-protocol broker on Redis Streams (formally specified reference)",
    )
    parser.add_argument("--version", action="version", version=f"korvet {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the broker",
        description=(
            "Run the Kafka broker. Without --redis-url it starts an embedded redis-server on a "
            "free loopback port with its data under --data-dir. Settings come from defaults, "
            "then --config FILE (YAML), then KORVET_* environment variables, then these flags."
        ),  # each flag's help names its default and variable (argparse's defaults are None)
    )
    add_arguments(serve)
    serve.set_defaults(func=_serve)

    from korvet import users
    from korvet.bench import cli as bench_cli
    from korvet.conformance import cli as conformance_cli
    from korvet.faults import cli as faults_cli
    from korvet.pipelines import cli as pipeline_cli
    from korvet.verification import cli as spec_cli

    spec_cli.add_parser(commands)
    pipeline_cli.add_parser(commands)
    bench_cli.add_parser(commands)
    conformance_cli.add_parser(commands)
    users.add_parser(commands)
    faults_cli.add_parser(commands)

    jars = commands.add_parser("jars", help="pinned JVM jars, resolved by Maven (mvn)")
    jar_commands = jars.add_subparsers(dest="jars_command", required=True)
    jar_commands.add_parser("list", help="list the jar sets")
    fetch = jar_commands.add_parser("fetch", help="download and verify jar sets (all by default)")
    fetch.add_argument("sets", nargs="*")
    cp = jar_commands.add_parser("classpath", help="print the class path of a set")
    cp.add_argument("set")
    lock = jar_commands.add_parser("lock", help="(maintainers) resolve coordinates with Maven "
                                   "and write korvet/jvm/locks/SET.lock")
    lock.add_argument("set")
    lock.add_argument("coordinates", nargs="+", metavar="GROUP:ARTIFACT:VERSION")
    lock.add_argument("--comment", default="")
    lock.add_argument("--exclude", action="append", default=[], metavar="GROUP:ARTIFACT",
                      help="cut this artifact (and what only it needs) from the tree; repeatable")
    jars.set_defaults(func=_jars)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
