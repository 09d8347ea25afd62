"""Throwaway PKI for one control plane, made with the ``openssl`` command at start-up.

A CA signs the API server's serving certificate (for 127.0.0.1) and an admin client certificate in the
``system:masters`` group; a separate RSA key pair signs and verifies ServiceAccount tokens.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_crt: Path
    ca_key: Path
    server_crt: Path
    server_key: Path
    admin_crt: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path
    proxy_crt: Path
    proxy_key: Path
    """The API server's client certificate towards aggregated API servers (front proxy)."""


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("'openssl' is not on PATH: install the Debian package 'openssl'")
    proc = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _sign(d: Path, name: str, subject: str, ext: str) -> tuple[Path, Path]:
    """A key and a certificate for ``subject`` signed by the CA in ``d``, with the given v3 extensions."""
    (d / f"{name}.ext").write_text(ext)
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d,
    )  # fmt: skip
    return d / f"{name}.crt", d / f"{name}.key"


def make_pki(d: Path) -> Pki:
    """Write every key and certificate the control plane needs into ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=descheduler-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    server_crt, server_key = _sign(
        d,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n",
    )
    client = (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    admin_crt, admin_key = _sign(d, "admin", "/O=system:masters/CN=test-admin", client)
    proxy_crt, proxy_key = _sign(d, "front-proxy-client", "/CN=front-proxy-client", client)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    return Pki(
        d / "ca.crt", d / "ca.key", server_crt, server_key, admin_crt, admin_key, d / "sa.key", d / "sa.pub",
        proxy_crt, proxy_key,
    )  # fmt: skip
