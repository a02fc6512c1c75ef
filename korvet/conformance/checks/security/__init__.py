"""Security: TLS listeners, SASL (SaslHandshake 17, SaslAuthenticate 36; PLAIN, SCRAM-SHA-256/512),
re-authentication (KIP-368), SCRAM users (50/51), ACLs (29-31) and what the authorizer refuses.

These checks need a secured broker: ``korvet conformance --security FILE`` names its SASL_SSL
listener, the CA that signed the broker's certificate and a super user (YAML)::

    sasl_ssl: 127.0.0.1:9093          # a SASL_SSL listener with PLAIN and SCRAM-SHA-256/512
    ca_file: /path/to/ca.pem
    admin: {user: admin, password: admin-secret}   # a super user: SCRAM-SHA-256, -512 and PLAIN
    plaintext: 127.0.0.1:9092         # optional: a PLAINTEXT listener of the same broker

The broker must run an authorizer with ``allow.everyone.if.no.acl.found=false`` (Kafka's
StandardAuthorizer; Korvet's ``authorizer.enabled``). The re-authentication checks need
``connections.max.reauth.ms`` between 3 and 20 seconds (8000 in the suite's own runs; the
other checks keep their connections shorter than that), and are skipped at 0.

The checks create their own users (AlterUserScramCredentials as the admin), topics, groups
and ACLs, named after the run and the check, and delete the users and ACLs when they end.
Rights given by a CreateAcls may reach a broker a moment later (Kafka's metadata log), so
checks wait for a grant to apply. Without ``--security`` every check here is skipped with that reason.

- ``tls``: what a TLS listener refuses;
- ``sasl``: the SASL exchange, re-authentication and SCRAM users;
- ``acls``: the ACL API and what the authorizer allows and refuses;
- ``secure``: what they share: the check's access to the secured listener (``Secure``).
"""
