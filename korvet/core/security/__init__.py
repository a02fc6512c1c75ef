"""Security rules, pure: SCRAM (RFC 5802/7677, Kafka's KIP-84), the per-connection SASL
state machine (KIP-43, KIP-152, KIP-368), the ACL authorizer model (Kafka's StandardAuthorizer
semantics), the table of which API needs which ACL, and listener specifications.

Nothing here reads a clock, a socket, Redis or randomness: nonces, the time and loaded
credentials are inputs (docs/implementers/security.md).
"""
