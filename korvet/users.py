"""`korvet users add|list|delete`: SASL/SCRAM users, kept in Redis as salted keys only.

    korvet users add alice                 # asks for the password (or reads it from stdin)
    korvet users add alice --mechanism SCRAM-SHA-512 --iterations 8192 < password.txt
    korvet users list
    korvet users delete alice

The users live where the broker keeps them (``{redis.keyspace}:scram:{mechanism}``), so
every broker sharing the Redis knows them at once; Kafka's own ``kafka-configs --alter
--add-config 'SCRAM-SHA-512=[password=...]' --entity-type users`` writes the same entries
through the broker. Redis is found as ``korvet serve`` finds it: ``--redis-url`` (with the
redis.username/password/TLS settings), or the embedded Redis of a broker running with the
same ``--data-dir``. The password is never printed, logged or stored.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from korvet.core.security import scram
from korvet.settings import BrokerSettings, ConfigError, load

DEFAULT_ITERATIONS = 8192


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "users", help="manage SASL/SCRAM users (stored in Redis as salted keys)",
        description=("Add, list and delete the users SASL listeners authenticate (SCRAM-SHA-256, "
                     "SCRAM-SHA-512, and PLAIN against them). Redis is the broker's: --redis-url, "
                     "or the embedded Redis of a broker running with --data-dir."))
    # Where Redis is may be given before or after the subcommand (`korvet users add
    # --redis-url URL alice`); after it, only what is given overrides what came before.
    for target, default in ((parser, None), (where := argparse.ArgumentParser(add_help=False),
                                             argparse.SUPPRESS)):
        target.add_argument("--config", metavar="FILE", default=default,
                            help="the broker's YAML settings")
        target.add_argument("--redis-url", default=default,
                            help="the broker's Redis (default: its embedded Redis)")
        target.add_argument("--data-dir", default=default,
                            help="the broker's data folder (embedded Redis)")
        target.add_argument("--keyspace", default=default, help="the broker's redis.keyspace")
    sub = parser.add_subparsers(dest="users_command", required=True)
    add = sub.add_parser("add", help="add a user or change its password", parents=[where])
    add.add_argument("name")
    add.add_argument("--mechanism", choices=[*sorted(scram.MECHANISMS), "all"], default="all",
                     help="which SCRAM credentials to store (default: both)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations, {scram.MIN_ITERATIONS}..{scram.MAX_ITERATIONS} "
                          f"(default {DEFAULT_ITERATIONS})")
    add.add_argument("--password-env", metavar="VAR",
                     help="read the password from this environment variable")
    sub.add_parser("list", help="list users and their mechanisms", parents=[where])
    delete = sub.add_parser("delete", help="delete a user's credentials", parents=[where])
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=[*sorted(scram.MECHANISMS), "all"], default="all")
    parser.set_defaults(func=run)


def _password(args: argparse.Namespace) -> str:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if value is None:
            raise ValueError(f"environment variable {args.password_env} is not set")
        return value
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def _redis_url(settings: BrokerSettings) -> str:
    url = settings.redis.url
    if url:
        return url
    path = Path(settings.data.dir) / "redis" / "redis.url"
    if not path.is_file():
        raise ValueError(f"no --redis-url and no embedded Redis at {path.parent}: start the broker "
                         "(korvet serve) or pass --redis-url")
    return path.read_text().strip()


async def _run(args: argparse.Namespace, settings: BrokerSettings) -> int:
    from korvet.server.app import StartupError, connect_redis
    from korvet.storage.security import CredentialStore

    url = _redis_url(settings)
    try:
        client = await connect_redis(url, settings.security.redis if settings.redis.url else None,
                                     cluster=settings.redis.cluster)
    except StartupError as exc:
        print(f"korvet users: {exc}", file=sys.stderr)
        return 2
    store = CredentialStore(client, settings.redis.keyspace)
    try:
        if args.users_command == "list":
            users = await store.users()
            for name in sorted(users):
                shown = ", ".join(f"{m} ({i} iterations)" for m, i in sorted(users[name].items()))
                print(f"{name}\t{shown}")
            if not users:
                print("no users", file=sys.stderr)
            return 0
        mechanisms = sorted(scram.MECHANISMS) if args.mechanism == "all" else [args.mechanism]
        if args.users_command == "delete":
            deleted = [m for m in mechanisms if await store.delete(args.name, m)]
            if not deleted:
                print(f"korvet users: {args.name} has no {' or '.join(mechanisms)} credential",
                      file=sys.stderr)
                return 1
            print(f"deleted {args.name} ({', '.join(deleted)})")
            return 0
        password = _password(args)
        if not password:
            raise ValueError("the password is empty")
        for mechanism in mechanisms:
            credential = scram.credential_from_password(
                scram.MECHANISMS[mechanism], password, os.urandom(24), args.iterations)
            await store.put(args.name, mechanism, credential)
        print(f"stored {args.name} ({', '.join(mechanisms)}, {args.iterations} iterations)")
        return 0
    finally:
        await client.aclose()


def run(args: argparse.Namespace) -> int:
    overrides = {"redis.url": args.redis_url, "data.dir": args.data_dir,
                 "redis.keyspace": args.keyspace}
    try:
        settings = load(yaml_path=args.config, overrides=overrides)
        return asyncio.run(_run(args, settings))
    except (ConfigError, ValueError, scram.ScramError) as exc:
        print(f"korvet users: {exc}", file=sys.stderr)
        return 2
