"""Debian's nginx as a reverse proxy in front of a test receiver, for the tests behind real servers.

Started on 127.0.0.1 with a configuration file and prefix directory of its
own (never the system's service): ``nginx -p DIR -c DIR/nginx.conf -e
DIR/error.log -g 'daemon off;'``. nginx's defaults hold where they matter
(the 1 MiB ``client_max_body_size``, request bodies buffered before they
are passed on, its own error pages); the test sets the client side's
keep-alive and, if it likes, a body limit and TLS. As root its worker runs
as root too (a worker as ``nobody`` could not write the body buffers in a
directory the test made); as another user, as that user.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.support.process import LocalServer

_CONFIG = """\
{user}worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    keepalive_timeout {keepalive_timeout};
    keepalive_requests {keepalive_requests};
    {body_limit}
    upstream receiver {{
        server 127.0.0.1:{upstream};
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port}{ssl};
        {tls}
        location / {{
            proxy_pass http://receiver;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def find_nginx() -> str | None:
    """The nginx binary, or None."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if os.access(p, os.X_OK)), None)


class Nginx(LocalServer):
    """``with Nginx(receiver.port, keepalive_timeout="2s") as proxy: proxy.url``"""

    name = "nginx"
    log_name = "error.log"

    def __init__(self, upstream: int, *, keepalive_timeout: str = "75s",
                 keepalive_requests: int = 1000, client_max_body_size: str | None = None,
                 certificate: tuple[Path, Path] | None = None) -> None:
        """``upstream``: the receiver's port on 127.0.0.1; ``client_max_body_size``: None
        keeps nginx's default (1 MiB); ``certificate``: (chain, key) PEM files to serve
        HTTPS with."""
        binary = find_nginx()
        if binary is None:
            raise RuntimeError("nginx is not installed")
        self.binary = binary
        super().__init__()
        tls = ""
        if certificate is not None:
            chain, key = certificate
            tls = f"ssl_certificate {chain};\n        ssl_certificate_key {key};"
        self._config = _CONFIG.format(
            user="user root root;\n" if os.geteuid() == 0 else "",
            directory=self.directory, keepalive_timeout=keepalive_timeout,
            keepalive_requests=keepalive_requests,
            body_limit=(f"client_max_body_size {client_max_body_size};"
                        if client_max_body_size else ""),
            upstream=upstream, port=self.port, ssl=" ssl" if certificate else "", tls=tls)
        self.scheme = "https" if certificate else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/"

    def command(self) -> list[str]:
        config = self.directory / "nginx.conf"
        config.write_text(self._config, "utf-8")
        return [self.binary, "-p", str(self.directory), "-c", str(config),
                "-e", str(self.directory / self.log_name), "-g", "daemon off;"]
