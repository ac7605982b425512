"""kopf's credentials are read anew at each login: kopf logs in again after a 401, and a rotated
ServiceAccount token or an exec plugin's fresh credential must then be what it gets."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import yaml

from trainguard.controller.run import connection_info


def kubeconfig_with_exec_plugin(tmp_path: Path) -> tuple[Path, Path]:
    token = tmp_path / "token"
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib\n"
        f"token = pathlib.Path({str(token)!r}).read_text().strip()\n"
        'print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",'
        ' "status": {"token": token}}))\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                  "command": str(plugin), "interactiveMode": "Never"}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, token


def test_each_login_runs_the_exec_plugin_again(tmp_path: Path) -> None:
    path, token = kubeconfig_with_exec_plugin(tmp_path)
    token.write_text("first-token")
    first = connection_info(str(path))
    assert first.token == "first-token" and first.server == "https://127.0.0.1:6443"
    token.write_text("rotated-token")
    assert connection_info(str(path)).token == "rotated-token"


def test_a_plain_token_kubeconfig_is_read_at_login_time(tmp_path: Path) -> None:
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x",
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    info = connection_info(str(path))
    assert (info.token, info.insecure) == ("abc", True)
    config["users"][0]["user"]["token"] = "def"  # type: ignore[index]
    path.write_text(json.dumps(config))
    assert connection_info(str(path)).token == "def"
