"""The Kafka error codes the group coordinator answers with: the core's one table."""

from korvet.core.errors import ErrorCode

__all__ = ["ErrorCode"]
