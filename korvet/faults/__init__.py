"""Fault-injection runs with a history checker (``korvet faults``).

``history`` is the checker (pure: events in, a report out); the rest starts a topology
(Korvet on one Redis, several brokers on one Redis, several on a Redis Cluster, or Apache
Kafka), runs producers and a consumer group against it while a seeded scheduler injects
faults, records what the clients saw, and hands that history to the checker.
See docs/users/fault-runs.md.
"""
