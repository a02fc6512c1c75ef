"""Throw-away TLS material for tests and local set-ups, made with the ``openssl`` command.

``CertificateAuthority(folder)`` creates a CA (``ca.pem``, ``ca.key``); ``issue(name, cn)``
signs a certificate for a server (``serverAuth``, names ``localhost`` and ``127.0.0.1``
by default) or a client (``clientAuth``), writing ``<name>.pem`` (certificate),
``<name>.key`` (unencrypted PKCS#8 key, EC P-256) and ``<name>.bundle.pem`` (key then
certificate chain: what Java's PEM key stores, ``ssl.keystore.type=PEM``, read). Nothing
here is fit for production: the keys are unencrypted and live two days.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class CertificateError(RuntimeError):
    """openssl is missing or refused to make a certificate."""


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertificateError("openssl not found (Debian: apt-get install openssl)")
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                            check=False)
    if result.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {result.stderr.strip()[-500:]}")


@dataclass(frozen=True, slots=True)
class Issued:
    cert: Path
    key: Path
    bundle: Path  # key + certificate + CA certificate, for Java's PEM key store
    subject: str  # as Kafka prints the principal's name: CN=...,O=...


class CertificateAuthority:
    def __init__(self, folder: Path | str, *, name: str = "Korvet Test CA") -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.cert = self.folder / "ca.pem"
        self.key = self.folder / "ca.key"
        if not self.cert.is_file():
            _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", self.key.name, "-out", self.cert.name, "-days", "2",
                     "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.folder)

    def issue(self, name: str, common_name: str, *, organization: str = "Korvet Tests",
              client: bool = False, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Issued:
        cert, key = self.folder / f"{name}.pem", self.folder / f"{name}.key"
        csr, ext = self.folder / f"{name}.csr", self.folder / f"{name}.ext"
        names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
        usage = "clientAuth" if client else "serverAuth"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                       f"extendedKeyUsage={usage}\n" + (f"subjectAltName={names}\n" if names else ""))
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", key.name, "-out", csr.name, "-subj", f"/O={organization}/CN={common_name}",
                 cwd=self.folder)
        _openssl("x509", "-req", "-in", csr.name, "-CA", self.cert.name, "-CAkey", self.key.name,
                 "-CAcreateserial", "-out", cert.name, "-days", "2", "-extfile", ext.name,
                 cwd=self.folder)
        bundle = self.folder / f"{name}.bundle.pem"
        bundle.write_text(key.read_text() + cert.read_text() + self.cert.read_text())
        csr.unlink()
        ext.unlink()
        return Issued(cert, key, bundle, f"CN={common_name},O={organization}")
