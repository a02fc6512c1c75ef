"""Korvet: a Kafka-wire-protocol broker that stores its data in Redis Streams."""

__version__ = "0.1.0"
