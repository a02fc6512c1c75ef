"""The secured listener the ``security.*`` checks run against (``--security FILE``).

A YAML file names the broker's SASL_SSL listener, the CA that signed the broker's
certificate and a super user::

    sasl_ssl: 127.0.0.1:9093          # a SASL_SSL listener with PLAIN and SCRAM-SHA-256/512
    ca_file: /path/to/ca.pem
    admin: {user: admin, password: admin-secret}   # a super user: SCRAM-SHA-256, -512 and PLAIN
    plaintext: 127.0.0.1:9092         # optional: a PLAINTEXT listener of the same broker

The runner hands it to every check's context (``ctx.security``); without it the security
checks are skipped. What they need of the broker: korvet/conformance/checks/security/.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True, slots=True)
class SecurityTarget:
    sasl_ssl: str
    ca_file: str
    admin_user: str
    admin_password: str
    plaintext: str = ""

    @classmethod
    def load(cls, path: Path | str) -> SecurityTarget:
        try:
            doc = yaml.safe_load(Path(path).read_text()) or {}
            admin = doc.get("admin") or {}
            return cls(str(doc["sasl_ssl"]), str(doc["ca_file"]), str(admin["user"]),
                       str(admin["password"]), str(doc.get("plaintext") or ""))
        except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: a security target needs sasl_ssl, ca_file and admin.user/"
                             f"password ({exc})") from None
